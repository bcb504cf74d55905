//! Safetensors checkpoints: one `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, read through memory maps and converted to f32.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use super::HfError;

/// The weight files of a model directory and which file holds each tensor.
pub struct Checkpoint {
    dir: PathBuf,
    files: Vec<(PathBuf, Mmap)>,
    /// Tensor name -> index into `files`.
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint").field("dir", &self.dir).field("tensors", &self.index.len()).finish()
    }
}

fn open_file(path: &Path) -> Result<Mmap, HfError> {
    let file = std::fs::File::open(path).map_err(|e| HfError::file(path, e))?;
    // SAFETY: the map is read-only; a checkpoint is not expected to change while it is read.
    unsafe { Mmap::map(&file) }.map_err(|e| HfError::file(path, e))
}

fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, HfError> {
    SafeTensors::deserialize(bytes)
        .map_err(|e| HfError::file(path, format!("not a valid safetensors file (truncated or corrupt?): {e}")))
}

impl Checkpoint {
    /// Opens `dir/model.safetensors`, or the shards named by `dir/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self, HfError> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let mut files = Vec::new();
        let mut index = HashMap::new();
        if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path).map_err(|e| HfError::file(&index_path, e))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| HfError::file(&index_path, format!("not valid JSON: {e}")))?;
            let map = json["weight_map"]
                .as_object()
                .ok_or_else(|| HfError::file(&index_path, "has no `weight_map` object"))?;
            let mut shard_of: HashMap<String, usize> = HashMap::new();
            for (key, file) in map {
                let name =
                    file.as_str().ok_or_else(|| HfError::file(&index_path, format!("`{key}` maps to a non-string")))?;
                let next = shard_of.len();
                let shard = *shard_of.entry(name.to_string()).or_insert(next);
                index.insert(key.clone(), shard);
            }
            let mut shards: Vec<(String, usize)> = shard_of.into_iter().collect();
            shards.sort_by_key(|(_, i)| *i);
            for (name, _) in shards {
                let path = dir.join(&name);
                let map = open_file(&path)?;
                parse(&path, &map)?;
                files.push((path, map));
            }
        } else if single.is_file() {
            let map = open_file(&single)?;
            for name in parse(&single, &map)?.names() {
                index.insert(name.to_string(), 0);
            }
            files.push((single, map));
        } else {
            return Err(HfError::file(dir, "holds neither model.safetensors nor model.safetensors.index.json"));
        }
        Ok(Self { dir: dir.to_path_buf(), files, index })
    }

    /// Whether the checkpoint has a tensor of that name.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Every tensor name, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.index.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    /// The header entry of tensor `key` (its data stays in the memory map).
    fn view(&self, key: &str) -> Result<TensorView<'_>, HfError> {
        let missing = || HfError::MissingTensor { key: key.to_string(), dir: self.dir.display().to_string() };
        let &file = self.index.get(key).ok_or_else(missing)?;
        let (path, bytes) = &self.files[file];
        parse(path, bytes)?.tensor(key).map_err(|_| missing())
    }

    /// The shape of tensor `key`, read from its file's header without converting anything.
    pub fn shape(&self, key: &str) -> Result<Vec<usize>, HfError> {
        Ok(self.view(key)?.shape().to_vec())
    }

    /// The tensor `key` as f32 values in row-major order, checked to have `shape`.
    pub fn tensor(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, HfError> {
        let view = self.view(key)?;
        if view.shape() != shape {
            return Err(HfError::Shape {
                key: key.to_string(),
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let data = view.data();
        Ok(match view.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => return Err(HfError::DType { key: key.to_string(), dtype: format!("{other:?}") }),
        })
    }
}

/// Writes f32 tensors (`name`, shape, row-major values) as one safetensors file, atomically,
/// with the `{"format": "pt"}` metadata transformers expects.
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
                .map_err(|e| HfError::file(path, format!("tensor `{name}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let serialized = safetensors::serialize(views, Some(metadata)).map_err(|e| HfError::file(path, e))?;
    crate::io::write_atomically(path, &serialized).map_err(|e| HfError::file(path, e))
}
