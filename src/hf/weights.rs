//! Safetensors checkpoints: one `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, each file read by burn-store (memory-mapped, every tensor's
//! bytes read only when asked for).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::tensor::DType;
use burn_store::burn_pack::Tensor as PackTensor;
use burn_store::{bridge, ModuleStore, SafetensorsStore, SafetensorsStoreError};
use safetensors::Dtype;

use super::HfError;

/// The tensors of a model directory, by Hugging Face name.
///
/// burn-store's [`SafetensorsStore`] reads one file; the shards of an index are merged here, each
/// tensor taken from the file the index names.
pub struct Checkpoint {
    dir: PathBuf,
    tensors: BTreeMap<String, PackTensor>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint").field("dir", &self.dir).field("tensors", &self.tensors.len()).finish()
    }
}

/// Every tensor of one safetensors file (headers only: the data stays in the memory map).
fn read_file(path: &Path) -> Result<BTreeMap<String, PackTensor>, HfError> {
    let mut store = SafetensorsStore::from_file(path);
    store.get_all_tensors().cloned().map_err(|e| match e {
        SafetensorsStoreError::Io(error) => HfError::Io { path: path.to_path_buf(), error },
        SafetensorsStoreError::Safetensors(e) => {
            HfError::NotSafetensors { path: path.to_path_buf(), error: e.to_string() }
        }
        other => HfError::CannotRead { path: path.to_path_buf(), error: other.to_string() },
    })
}

impl Checkpoint {
    /// Opens `dir/model.safetensors`, or the shards named by `dir/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self, HfError> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let tensors = if index_path.is_file() {
            let json = super::json_file::read_json(&index_path)?;
            let bad_index =
                |key: Option<&String>| HfError::BadShardIndex { path: index_path.clone(), key: key.cloned() };
            let map = json["weight_map"].as_object().ok_or_else(|| bad_index(None))?;
            let mut shards: HashMap<&str, BTreeMap<String, PackTensor>> = HashMap::new();
            let mut tensors = BTreeMap::new();
            for (key, file) in map {
                let name = file.as_str().ok_or_else(|| bad_index(Some(key)))?;
                if !shards.contains_key(name) {
                    shards.insert(name, read_file(&dir.join(name))?);
                }
                // A name the index lists but its shard lacks is missing, as it would be unlisted.
                if let Some(tensor) = shards[name].get(key) {
                    tensors.insert(key.clone(), tensor.clone());
                }
            }
            tensors
        } else if single.is_file() {
            read_file(&single)?
        } else if let (Ok(_), Err(error)) = (single.symlink_metadata(), single.metadata()) {
            // The Hugging Face cache links each snapshot file to a blob: one removed or never
            // downloaded leaves the link.
            return Err(HfError::BrokenLink { path: single, error });
        } else {
            return Err(HfError::NoWeights { dir: dir.to_path_buf() });
        };
        Ok(Self { dir: dir.to_path_buf(), tensors })
    }

    /// Whether the checkpoint has a tensor of that name.
    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains_key(key)
    }

    /// Every tensor name, sorted.
    pub fn keys(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    /// Tensor `key` (its data unread).
    pub(super) fn get(&self, key: &str) -> Result<&PackTensor, HfError> {
        self.tensors
            .get(key)
            .ok_or_else(|| HfError::MissingTensor { key: key.to_string(), dir: self.dir.display().to_string() })
    }

    /// The shape of tensor `key`, read from its file's header without converting anything.
    pub fn shape(&self, key: &str) -> Result<Vec<usize>, HfError> {
        Ok(self.get(key)?.shape.to_vec())
    }

    /// Tensor `key` checked to have `shape` and a float type this crate reads (F32, F16, BF16).
    pub(super) fn checked(&self, key: &str, shape: &[usize]) -> Result<&PackTensor, HfError> {
        let tensor = self.get(key)?;
        if tensor.shape.as_slice() != shape {
            return Err(HfError::Shape {
                key: key.to_string(),
                expected: shape.to_vec(),
                found: tensor.shape.to_vec(),
            });
        }
        if !matches!(tensor.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(HfError::DType { key: key.to_string(), dtype: format!("{:?}", tensor.dtype) });
        }
        Ok(tensor)
    }

    /// The tensor `key` as f32 values in row-major order, checked to have `shape`.
    pub fn tensor(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, HfError> {
        let unreadable = |error: String| HfError::BadTensorData { path: self.dir.clone(), key: key.to_string(), error };
        let data = bridge::to_data(self.checked(key, shape)?).map_err(|e| unreadable(e.to_string()))?;
        data.try_cast_as::<f32>().and_then(|data| data.try_into_vec::<f32>()).map_err(|e| unreadable(e.to_string()))
    }
}

/// Writes f32 tensors (`name`, shape, row-major values) as one safetensors file, atomically,
/// with the `{"format": "pt"}` metadata transformers expects.
///
/// For tensors that belong to no module (a checkpoint edited by hand), so written with the
/// safetensors crate itself: burn-store saves modules.
pub fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Result<(), HfError> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, shape, values)| {
            (name.clone(), shape.clone(), values.iter().flat_map(|v| v.to_le_bytes()).collect())
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, shape, data)| {
            safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|view| (name.clone(), view))
                .map_err(|e| HfError::CannotWrite { path: path.to_path_buf(), error: format!("tensor `{name}`: {e}") })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let serialized = safetensors::serialize(views, Some(metadata))
        .map_err(|e| HfError::CannotWrite { path: path.to_path_buf(), error: e.to_string() })?;
    crate::io::write_atomically(path, &serialized).map_err(|error| HfError::Io { path: path.to_path_buf(), error })
}
