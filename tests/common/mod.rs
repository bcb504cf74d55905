//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod op_check;
pub mod optimiser_steps;

use burn::module::{ModuleVisitor, Param};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use layernorm_scaling::parse_device;
use layernorm_scaling::train::{
    CheckpointSettings, DataSettings, EvalSettings, ModelSettings, OptimSettings, OutputSettings,
};

/// The CPU device every test uses unless it compares backends.
pub fn cpu() -> Device {
    parse_device("flex").expect("the default `flex` feature is compiled in")
}

/// Every backend compiled into this test build, CPU first. `wgpu` runs on a software Vulkan
/// adapter (Mesa lavapipe), which `.ci/run` installs.
pub fn all_backends() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("flex", cpu())];
    if cfg!(feature = "ndarray") {
        devices.push(("ndarray", parse_device("ndarray").unwrap()));
    }
    if cfg!(feature = "wgpu") {
        devices.push(("wgpu-cpu", parse_device("wgpu-cpu").unwrap()));
    }
    if cfg!(feature = "tch") {
        devices.push(("tch", parse_device("tch").unwrap()));
        // LibTorch on an NVIDIA GPU, where the machine has one (and torch is a CUDA build).
        if let Ok(device) = parse_device("tch-cuda") {
            devices.push(("tch-cuda", device));
        }
    }
    devices
}

/// Random token ids `[batch, seq]` in `0..vocab`, reproducible for a seed.
pub fn random_tokens(batch: usize, seq: usize, vocab: usize, seed: u64, device: &Device) -> Tensor<2, Int> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let ids: Vec<i64> = (0..batch * seq)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as i64
        })
        .collect();
    Tensor::from_data(TensorData::new(ids, [batch, seq]), device)
}

/// A random normal tensor.
pub fn randn<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// The values of a tensor as f32.
pub fn values<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.to_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// The largest absolute difference between two slices of the same length.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Asserts that `message` mentions every one of `parts`.
pub fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "`{part}` is not in: {message}");
    }
}

/// `n_docs` built-in documents (seed 2) in the byte tokenizer, cached under `dir`, as sequences
/// of `seq_len` tokens.
pub fn builtin_data(dir: &std::path::Path, n_docs: usize, seq_len: usize) -> layernorm_scaling::data::SequenceDataset {
    use layernorm_scaling::data::{tokenize_corpus, CorpusSource, SequenceDataset, Tokenizer};
    let source = CorpusSource::Builtin { n_docs, seed: 2 };
    let cache = std::sync::Arc::new(tokenize_corpus(&source, &Tokenizer::Byte, dir).unwrap());
    let docs: Vec<usize> = (0..cache.n_docs()).collect();
    SequenceDataset::new(cache, &docs, seq_len)
}

/// The largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff<const D: usize>(a: &Tensor<D>, b: &Tensor<D>) -> f32 {
    assert_eq!(a.dims(), b.dims());
    values(a).iter().zip(values(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Mean and (population) standard deviation of a tensor's values.
pub fn mean_std<const D: usize>(t: &Tensor<D>) -> (f64, f64) {
    let v = values(t);
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Collects every float parameter with its path and its values.
#[derive(Default)]
pub struct ParamValues {
    pub path: Vec<String>,
    pub params: Vec<(String, Vec<f32>)>,
}

impl ParamValues {
    /// Every float parameter of `module` with its record path, in visiting order.
    pub fn of<M: burn::module::Module>(module: &M) -> Vec<(String, Vec<f32>)> {
        let mut visitor = ParamValues { path: Vec::new(), params: Vec::new() };
        module.visit(&mut visitor);
        visitor.params
    }

    /// Every value of [`of`](ParamValues::of), concatenated.
    pub fn flat_of<M: burn::module::Module>(module: &M) -> Vec<f32> {
        Self::of(module).into_iter().flat_map(|(_, v)| v).collect()
    }
}

impl ModuleVisitor for ParamValues {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.params.push((self.path.join("."), values(&param.val())));
    }
}

/// A quick training run of the tiny model on the built-in corpus (flex, 8 x 64 tokens a step).
pub fn quick(out: &std::path::Path, steps: usize, eval_every: usize) -> layernorm_scaling::train::TrainConfig {
    layernorm_scaling::train::TrainConfig {
        model: ModelSettings { preset: "tiny".into(), layers: None, ..Default::default() },
        data: DataSettings {
            builtin_docs: 2000,
            seq_len: 64,
            cache_dir: Some(out.parent().unwrap().join("cache")),
            ..Default::default()
        },
        optim: OptimSettings { batch_size: 8, steps, warmup: Some(5), lr: 3e-3, ..Default::default() },
        eval: EvalSettings { eval_every: Some(eval_every), eval_batches: 4, ..Default::default() },
        checkpoints: CheckpointSettings { save_every: Some(eval_every), ..Default::default() },
        output: OutputSettings { samples: 0, out: out.to_path_buf(), ..Default::default() },
        device: "flex".into(),
        ..Default::default()
    }
}

/// A copy of `config` with `edit` applied: one setting changed (`edited(&base, |c| c.optim.lr = 1.0)`).
pub fn edited(
    config: &layernorm_scaling::train::TrainConfig,
    edit: impl FnOnce(&mut layernorm_scaling::train::TrainConfig),
) -> layernorm_scaling::train::TrainConfig {
    let mut edited = config.clone();
    edit(&mut edited);
    edited
}

/// Asserts that `path` is a PNG of a drawn figure: it decodes, and neither is it one flat colour
/// nor nearly all background.
pub fn assert_png_not_blank(path: &std::path::Path) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().expect("a valid PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).expect("a decodable frame");
    assert!(info.width >= 200 && info.height >= 200, "{}: {}x{}", path.display(), info.width, info.height);
    let channels = info.line_size / info.width as usize;
    let pixels = &pixels[..info.buffer_size()];
    let background = &pixels[..channels];
    let drawn = pixels.chunks(channels).filter(|p| *p != background).count();
    let colours: std::collections::HashSet<&[u8]> = pixels.chunks(channels).collect();
    let total = (info.width * info.height) as usize;
    assert!(drawn * 100 > total, "{}: only {drawn} of {total} pixels drawn", path.display());
    assert!(colours.len() >= 8, "{}: only {} colours", path.display(), colours.len());
}

/// An example binary cargo builds beside the tests (`target/<profile>/examples/<name>`).
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    assert!(path.is_file(), "{} is not built; run the tests with cargo test", path.display());
    path
}

/// Fails, saying how to run them, unless this test build has the crate's fault points
/// (`io::fault`): the tests that kill a run or fill its disk need them, and they are compiled only
/// into debug builds.
pub fn require_fault_points() {
    if !layernorm_scaling::io::FAULT_INJECTION {
        panic!("this test injects faults, which are compiled only into debug test builds: run `cargo test` without `--release`");
    }
}

/// Every file below `dir` (but the lock) with its bytes, to check that nothing changed.
pub fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if entry.file_name() != ".lock" {
                files.push((path.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// The parameter values of the final model of the run in `out` (the `.bpk` bytes also hold
/// per-process parameter ids).
pub fn weights(out: &std::path::Path) -> Vec<(String, Vec<f32>)> {
    ParamValues::of(&layernorm_scaling::run::load_run_model(out, None, &cpu()).unwrap().0)
}

/// Losses of `steps` Adam steps (lr 1e-2) on one fixed batch of 4 x 16 tokens of a 256-token
/// vocabulary, and the trained model.
pub fn train_on_one_batch(
    config: &layernorm_scaling::LlamaConfig,
    steps: usize,
) -> (Vec<f32>, layernorm_scaling::Llama) {
    use burn::optim::{AdamConfig, GradientsParams};
    let device = cpu().autodiff();
    let tokens = random_tokens(4, 17, 256, 21, &device);
    let (inputs, targets) = (tokens.clone().narrow(1, 0, 16), tokens.narrow(1, 1, 16));
    let mut model = config.init(&device).unwrap();
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = model.next_token_loss(inputs.clone(), targets.clone());
        losses.push(values(&loss)[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    (losses, model)
}

/// Held by a test for its whole length, in a binary whose tests compare runs: Burn draws a
/// model's weights from the device's shared generator when they are first used, so a test drawing
/// beside a seeded run would change its weights. Each test of such a binary takes it first.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Redraws every weight matrix (parameters of 2 or more dimensions) from `Normal(0, std)` with a
/// generator of its own, so that a model is the same whatever other tests draw from the device's
/// shared generator meanwhile. 1-D parameters (norm weights, gates) keep their values.
pub struct Redraw {
    state: u64,
    std: f32,
}

impl Redraw {
    pub fn new(seed: u64, std: f32) -> Self {
        Self { state: seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407), std }
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.state >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

impl burn::module::ModuleMapper for Redraw {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if D < 2 {
            return param;
        }
        param.map(|t| {
            let shape = t.shape();
            let drawn: Vec<f32> = (0..shape.num_elements()).map(|_| self.std * self.normal()).collect();
            let redrawn = Tensor::from_data(TensorData::new(drawn, shape), &t.device());
            if t.is_require_grad() {
                redrawn.require_grad()
            } else {
                redrawn
            }
        })
    }
}

/// A path under `tests/fixtures` (`choices/valid.jsonl`).
pub fn fixture(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// A Hugging Face model directory of `tests/fixtures/hf` (`llama_mha_untied`), made by
/// `scripts/hf_fixtures.py`.
pub fn hf_fixture(name: &str) -> std::path::PathBuf {
    fixture("hf").join(name)
}

/// Asserts that `weight`'s values have mean about 0 and standard deviation `expected`, within 5%
/// of `expected`.
pub fn assert_std(weight: &Tensor<2>, expected: f64, what: &str) {
    let (mean, std) = mean_std(weight);
    assert!(mean.abs() < expected * 0.05, "{what}: mean {mean}");
    assert!((std - expected).abs() < expected * 0.05, "{what}: std {std}, expected {expected}");
}

/// The error `train` gives for `config` started as `start`, asserting that it mentions `expected`.
pub fn expect_error(
    config: &layernorm_scaling::train::TrainConfig,
    start: layernorm_scaling::train::Start,
    expected: &str,
) -> layernorm_scaling::Error {
    let err = layernorm_scaling::train::train(config, start, |_| {}).unwrap_err();
    assert!(err.to_string().contains(expected), "`{err}` should mention `{expected}`");
    err
}

/// The data error `train` refuses `config` started as `start` with: fails unless it is refused with
/// an [`Error::Data`](layernorm_scaling::Error::Data).
pub fn expect_data_error(
    config: &layernorm_scaling::train::TrainConfig,
    start: layernorm_scaling::train::Start,
) -> layernorm_scaling::data::DataError {
    match layernorm_scaling::train::train(config, start, |_| {}).err() {
        Some(layernorm_scaling::Error::Data(error)) => error,
        other => panic!("expected a data error, got {other:?}"),
    }
}

/// The run directory's refusal of a training of `config` as `start`: fails unless `train` is
/// refused with an [`Error::RunDir`](layernorm_scaling::Error::RunDir) whose error `is` accepts.
pub fn expect_refusal(
    config: &layernorm_scaling::train::TrainConfig,
    start: layernorm_scaling::train::Start,
    is: impl Fn(&layernorm_scaling::run::RunDirError) -> bool,
) -> layernorm_scaling::run::RunDirError {
    match layernorm_scaling::train::train(config, start, |_| {}) {
        Err(layernorm_scaling::Error::RunDir { error, .. }) if is(&error) => error,
        other => panic!("expected the run directory's refusal, got {other:?}"),
    }
}

/// The changed settings a resume of `config` is refused for, as `(setting, change)`, and the
/// advice it gets: fails unless the resume is refused for changed settings.
pub fn refused_changes(
    config: &layernorm_scaling::train::TrainConfig,
) -> (Vec<(String, String)>, layernorm_scaling::run::ResumeAdvice) {
    use layernorm_scaling::run::RunDirError;
    let refused = |e: &RunDirError| matches!(e, RunDirError::SettingsChanged { .. });
    let RunDirError::SettingsChanged { changes, advice } =
        expect_refusal(config, layernorm_scaling::train::Start::Resume, refused)
    else {
        unreachable!()
    };
    (changes.into_iter().map(|c| (c.setting, c.change)).collect(), advice)
}

/// A finished [`quick`] run of 10 steps in `dir/run`, and its config.
pub fn finished_run(dir: &std::path::Path) -> layernorm_scaling::train::TrainConfig {
    let config = quick(&dir.join("run"), 10, 5);
    layernorm_scaling::train::train(&config, layernorm_scaling::train::Start::New, |_| {}).unwrap();
    config
}

/// Why loading the model of the run `dir` (its final model, or the checkpoint of `step`) fails:
/// the file named, and the problem. Fails unless the load is refused with an
/// [`Error::RunModel`](layernorm_scaling::Error::RunModel).
pub fn load_problem(
    dir: &std::path::Path,
    step: Option<usize>,
) -> (std::path::PathBuf, layernorm_scaling::run::LoadProblem) {
    match layernorm_scaling::run::load_run_model(dir, step, &cpu()) {
        Err(layernorm_scaling::Error::RunModel { path, problem }) => (path, *problem),
        other => panic!("expected a refused model file, got {:?}", other.map(|(_, info)| info)),
    }
}

/// Asserts that a program's `output` is a refusal: exit code 1, no panic, and each of `parts` in
/// its standard error; `what` names the run in a failure.
pub fn assert_refused(output: &std::process::Output, parts: &[&str], what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    for part in parts {
        assert!(stderr.contains(part), "{what}: {part:?} missing from: {stderr}");
    }
}
