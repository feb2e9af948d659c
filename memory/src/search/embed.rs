//! Text embeddings behind the [`Embedder`] trait; [`FastEmbedder`] runs
//! all-MiniLM-L6-v2 (ONNX) through fastembed, loading ONNX Runtime from a
//! configured path, fully offline.

use std::path::{Path, PathBuf};

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use parking_lot::Mutex;

use super::{SearchError, SearchResultOf};

/// Turns texts into L2-normalised vectors of a fixed dimension.
///
/// ```
/// use cairn_memory::search::Embedder;
/// struct Ones;
/// impl Embedder for Ones {
///     fn dimension(&self) -> usize { 2 }
///     fn embed(&self, texts: &[&str]) -> cairn_memory::search::SearchResultOf<Vec<Vec<f32>>> {
///         Ok(texts.iter().map(|_| vec![0.6, 0.8]).collect())
///     }
/// }
/// assert_eq!(Ones.embed(&["a"])?.len(), 1);
/// # Ok::<(), cairn_memory::search::SearchError>(())
/// ```
pub trait Embedder: Send + Sync {
    /// Vector dimension.
    fn dimension(&self) -> usize;
    /// Embeds a batch; one unit vector per text, in order.
    fn embed(&self, texts: &[&str]) -> SearchResultOf<Vec<Vec<f32>>>;
}

/// Where the model and ONNX Runtime live (see `scripts/setup-embeddings.sh`).
///
/// ```
/// use cairn_memory::search::EmbedConfig;
/// let config = EmbedConfig::new("/models/minilm", "/ort/libonnxruntime.so");
/// assert_eq!(config.max_tokens, 256);
/// ```
#[derive(Debug, Clone)]
pub struct EmbedConfig {
    /// Folder holding `model.onnx`, `tokenizer.json`, `config.json`,
    /// `special_tokens_map.json` and `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// Path of `libonnxruntime.so` (≥ 1.24).
    pub ort_dylib: PathBuf,
    /// Truncation length in tokens.
    pub max_tokens: usize,
    /// Texts per model call.
    pub batch_size: usize,
}

impl EmbedConfig {
    /// A configuration with the defaults (256 tokens, batch 32).
    pub fn new(model_dir: impl Into<PathBuf>, ort_dylib: impl Into<PathBuf>) -> Self {
        EmbedConfig {
            model_dir: model_dir.into(),
            ort_dylib: ort_dylib.into(),
            max_tokens: 256,
            batch_size: 32,
        }
    }

    /// Reads `CAIRN_EMBEDDING__MODEL_DIR` and `CAIRN_EMBEDDING__ORT_DYLIB`;
    /// `None` when either is unset.
    ///
    /// ```
    /// let _maybe = cairn_memory::search::EmbedConfig::from_env();
    /// ```
    pub fn from_env() -> Option<Self> {
        let model = std::env::var_os("CAIRN_EMBEDDING__MODEL_DIR")?;
        let ort = std::env::var_os("CAIRN_EMBEDDING__ORT_DYLIB")?;
        Some(EmbedConfig::new(model, ort))
    }
}

/// all-MiniLM-L6-v2 via fastembed: mean pooling over the attention mask,
/// no fixed padding, truncation at [`EmbedConfig::max_tokens`], then L2
/// normalisation.
///
/// `tokenizer.json` ships with padding fixed at 128 and truncation at 128;
/// fastembed's user-defined path replaces both (batch-longest padding, which
/// the attention mask hides from pooling, and truncation at the configured
/// length), which is what keeps dense recall intact.
pub struct FastEmbedder {
    model: Mutex<TextEmbedding>,
    batch_size: usize,
}

impl std::fmt::Debug for FastEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastEmbedder")
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

fn read(dir: &Path, name: &str) -> SearchResultOf<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| {
        SearchError::ModelUnavailable(format!(
            "cannot read {}: {e} (run scripts/setup-embeddings.sh and set CAIRN_EMBEDDING__MODEL_DIR)",
            path.display()
        ))
    })
}

impl FastEmbedder {
    /// Loads ONNX Runtime and the model. Errors (never panics) when either
    /// is missing.
    ///
    /// ```
    /// use cairn_memory::search::{EmbedConfig, FastEmbedder};
    /// let missing = FastEmbedder::load(&EmbedConfig::new("/nope", "/nope/libonnxruntime.so"));
    /// assert_eq!(missing.unwrap_err().code(), "model_unavailable");
    /// ```
    pub fn load(config: &EmbedConfig) -> SearchResultOf<Self> {
        if !config.ort_dylib.is_file() {
            return Err(SearchError::ModelUnavailable(format!(
                "ONNX Runtime not found at {} (run scripts/setup-embeddings.sh and set CAIRN_EMBEDDING__ORT_DYLIB)",
                config.ort_dylib.display()
            )));
        }
        let onnx = read(&config.model_dir, "model.onnx")?;
        let tokenizer_files = TokenizerFiles {
            tokenizer_file: read(&config.model_dir, "tokenizer.json")?,
            config_file: read(&config.model_dir, "config.json")?,
            special_tokens_map_file: read(&config.model_dir, "special_tokens_map.json")?,
            tokenizer_config_file: read(&config.model_dir, "tokenizer_config.json")?,
        };
        init_ort(&config.ort_dylib)?;
        let model =
            UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new().with_max_length(config.max_tokens);
        let model = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| SearchError::ModelUnavailable(format!("loading model: {e}")))?;
        Ok(FastEmbedder {
            model: Mutex::new(model),
            batch_size: config.batch_size.max(1),
        })
    }
}

/// `ort::init_from` once per process; later calls reuse the first outcome.
fn init_ort(path: &Path) -> SearchResultOf<()> {
    static INIT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let outcome = INIT.get_or_init(|| match ort::init_from(path) {
        Ok(_environment) => Ok(()),
        Err(e) => Err(format!("loading ONNX Runtime from {}: {e}", path.display())),
    });
    outcome.clone().map_err(SearchError::ModelUnavailable)
}

/// Scales `v` to unit length (leaves a zero vector alone).
pub(crate) fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

impl Embedder for FastEmbedder {
    fn dimension(&self) -> usize {
        384
    }

    fn embed(&self, texts: &[&str]) -> SearchResultOf<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Batches pad to their longest text: embedding in length order keeps
        // similar lengths together, so little compute goes to padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i]).collect();
        let vectors = self
            .model
            .lock()
            .embed(&sorted, Some(self.batch_size))
            .map_err(|e| SearchError::Embed(e.to_string()))?;
        if vectors.len() != texts.len() {
            return Err(SearchError::Embed(format!(
                "model returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (i, mut v) in order.into_iter().zip(vectors) {
            normalise(&mut v);
            out[i] = v;
        }
        Ok(out)
    }
}
