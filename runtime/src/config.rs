//! Configuration: defaults, then a `cairn.toml` file, then `CAIRN_*`
//! environment variables (nested keys joined by `__`, e.g.
//! `CAIRN_MEMORY__LIMITS__MAX_CONTENT_BYTES=65536`), then command-line flags.

use std::path::{Path, PathBuf};

use cairn_actors::ActorConfig;
use cairn_memory::{MemoryConfig, StorageBackend, StorageConfig};
use serde::{Deserialize, Serialize};

use crate::error::{CairnError, Result};
use cairn_policies::PolicyConfig;

/// Settings of `cairn serve`.
///
/// With no token configured the API is open, for local development, and
/// `cairn serve` refuses any listen address that is not loopback. With
/// tokens, every request but `/healthz` and `/openapi.json` needs
/// `Authorization: Bearer <token>`: a workspace token reaches its
/// workspaces' routes only; the admin token reaches everything (plugins,
/// erasing a workspace, `gateway_start`, index statistics).
///
/// ```
/// let s = cairn::ServerConfig::default();
/// assert!(s.admin_token.is_none() && s.tokens.is_empty());
/// assert!(!s.auth_enabled());
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on; loopback by default.
    pub listen: String,
    /// Largest JSON request body, in bytes.
    pub max_body_bytes: usize,
    /// The admin token (`CAIRN_SERVER__ADMIN_TOKEN`): every route.
    pub admin_token: Option<String>,
    /// Workspace tokens: each reaches the routes of its workspaces only.
    pub tokens: Vec<WorkspaceToken>,
    /// Host names (without port) a request's `Host` header may name. Empty:
    /// the loopback names when listening on loopback (a defence against DNS
    /// rebinding), any host otherwise.
    pub allowed_hosts: Vec<String>,
    /// Requests per minute one token (admin or workspace) may make on any
    /// route, bursts up to that many; 0 turns the limit off. Over it: 429
    /// `rate_limited`. A server without tokens (loopback only) is not
    /// limited.
    pub requests_per_minute: u32,
    /// Serve HTTPS with this certificate and key (`[server.tls]`); absent:
    /// plain HTTP (keep it on loopback, a Unix socket, or behind a proxy).
    pub tls: Option<TlsConfig>,
    /// Web origins (`https://dash.example`, `http://localhost:3000`: a
    /// scheme, a host and an optional port) that may send state-changing
    /// requests (anything but `GET`/`HEAD`) besides the server's own. A
    /// request whose `Origin` is another, or whose `Sec-Fetch-Site` says it
    /// is cross-site, is refused (403 `origin_not_allowed`): a web page the
    /// operator opens cannot end sessions or start sweeps. Clients that are
    /// not browsers send no `Origin` and are not concerned.
    pub allowed_origins: Vec<String>,
    /// Failed authentications (an unknown, revoked or malformed token) one
    /// peer address may make per minute, bursts up to that many; past it,
    /// its requests that carry a token are refused (429
    /// `too_many_failed_authentications`) before any check until the budget
    /// refills. 0 turns the limit off. Behind a reverse proxy every client
    /// shares the proxy's address.
    pub failed_auth_per_minute: u32,
    /// How often, in ms, a server on a shared store (PostgreSQL) reads the
    /// access tokens again, so a token made or revoked by another node or by
    /// the CLI counts here (100 to 3,600,000; default 2,000). This process's
    /// own changes count at once.
    pub token_refresh_ms: u64,
    /// Largest answer a cluster node reads from the owner of a workspace
    /// when it forwards a request there, in bytes; a larger one is answered
    /// 502 `answer_too_large`.
    pub max_forwarded_answer_bytes: u64,
}

/// A PEM certificate chain and its private key for `cairn serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file: the server's certificate, then any intermediates.
    pub cert: PathBuf,
    /// PEM file: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// A bearer token and the workspaces it opens.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceToken {
    /// The secret (at least 16 characters).
    pub token: String,
    /// Workspaces it may read and write.
    pub workspaces: Vec<String>,
}

impl std::fmt::Debug for WorkspaceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceToken")
            .field("token", &"<redacted>")
            .field("workspaces", &self.workspaces)
            .finish()
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("max_body_bytes", &self.max_body_bytes)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("tokens", &self.tokens)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("requests_per_minute", &self.requests_per_minute)
            .field("tls", &self.tls)
            .field("allowed_origins", &self.allowed_origins)
            .field("failed_auth_per_minute", &self.failed_auth_per_minute)
            .field("token_refresh_ms", &self.token_refresh_ms)
            .field(
                "max_forwarded_answer_bytes",
                &self.max_forwarded_answer_bytes,
            )
            .finish()
    }
}

impl ServerConfig {
    /// True when any token is configured, so requests must authenticate.
    pub fn auth_enabled(&self) -> bool {
        self.admin_token.is_some() || !self.tokens.is_empty()
    }

    fn validate(&self) -> Result<()> {
        let short = |t: &str| t.chars().count() < 16;
        if self.admin_token.as_deref().is_some_and(short) {
            return Err(CairnError::Config(
                "server.admin_token must be at least 16 characters".to_owned(),
            ));
        }
        for (i, t) in self.tokens.iter().enumerate() {
            if short(&t.token) {
                return Err(CairnError::Config(format!(
                    "server.tokens[{i}].token must be at least 16 characters"
                )));
            }
            if t.workspaces.is_empty() {
                return Err(CairnError::Config(format!(
                    "server.tokens[{i}].workspaces is empty: name the workspaces it opens"
                )));
            }
        }
        for (i, origin) in self.allowed_origins.iter().enumerate() {
            if let Err(why) = WebOrigin::parse(origin) {
                return Err(CairnError::Config(format!(
                    "server.allowed_origins[{i}] {}: {why}; write it as a browser sends \
                     it in `Origin`, e.g. \"https://dash.example\" or \"http://localhost:3000\"",
                    shown(origin)
                )));
            }
        }
        if !(100..=3_600_000).contains(&self.token_refresh_ms) {
            return Err(CairnError::Config(format!(
                "server.token_refresh_ms {} is out of range; use 100 to 3600000",
                self.token_refresh_ms
            )));
        }
        if self.max_forwarded_answer_bytes == 0 {
            return Err(CairnError::Config(
                "server.max_forwarded_answer_bytes must be greater than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

/// A web origin as a browser sends it in `Origin`: a scheme (`http` or
/// `https`), a host and a port (the scheme's default when not written).
///
/// ```
/// use cairn::WebOrigin;
/// let o = WebOrigin::parse("HTTPS://Dash.Example")?;
/// assert_eq!((o.scheme.as_str(), o.host.as_str(), o.port), ("https", "dash.example", 443));
/// assert_eq!(WebOrigin::parse("http://[::1]:7878")?.host, "::1");
/// assert!(WebOrigin::parse("null").is_err());
/// assert!(WebOrigin::parse("https://dash.example/app").is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOrigin {
    /// `http` or `https`.
    pub scheme: String,
    /// The host, lowercased, without brackets around an IPv6 address.
    pub host: String,
    /// The port, the scheme's default when the origin names none.
    pub port: u16,
}

impl WebOrigin {
    /// Reads an origin; the error says what is wrong with it.
    pub fn parse(origin: &str) -> std::result::Result<WebOrigin, String> {
        let origin = origin.trim().to_ascii_lowercase();
        let (scheme, rest) = origin
            .split_once("://")
            .ok_or_else(|| "not scheme://host[:port]".to_owned())?;
        let default_port = match scheme {
            "http" => 80,
            "https" => 443,
            other => return Err(format!("scheme {other:?} is neither http nor https")),
        };
        if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
            return Err("an origin is a scheme, a host and a port: no path, query or user".into());
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| "an IPv6 host without its closing `]`".to_owned())?;
            (host, after.strip_prefix(':'))
        } else {
            match rest.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (rest, None),
            }
        };
        if host.is_empty() {
            return Err("no host".to_owned());
        }
        let port = match port {
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("port {port:?} is not a port number"))?,
            None => default_port,
        };
        Ok(WebOrigin {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:7878".to_owned(),
            max_body_bytes: 16 * 1024 * 1024,
            admin_token: None,
            tokens: Vec::new(),
            allowed_hosts: Vec::new(),
            requests_per_minute: 6_000,
            tls: None,
            allowed_origins: Vec::new(),
            failed_auth_per_minute: 60,
            token_refresh_ms: 2_000,
            max_forwarded_answer_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Settings of logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter (`info`, `cairn=debug,warn`…); `RUST_LOG` wins if set.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: "text".to_owned(),
        }
    }
}

/// Settings of assembly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AssembleConfig {
    /// Budget used when a request names none, in tokens.
    pub default_budget_tokens: usize,
    /// The assembly's rules (tail, tiers, retrieval), `[assemble.settings]`.
    pub settings: cairn_memory::assemble::AssembleSettings,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        AssembleConfig {
            default_budget_tokens: 2_000,
            settings: cairn_memory::assemble::AssembleSettings::default(),
        }
    }
}

/// Where the local embedding model lives (`scripts/setup-embeddings.sh
/// --print-env` prints both as `CAIRN_EMBEDDING__*`).
///
/// A path left empty is looked for where the set-up script installs it
/// ([`embedding_cache_dir`]) when the configuration is loaded
/// ([`CairnConfig::load`], unless `discover` is off); [`origin`](Self::origin)
/// says which path came from where. Still empty after that: no model, search
/// is lexical and says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// Folder with `model.onnx` and the tokenizer files.
    pub model_dir: String,
    /// Path of `libonnxruntime.so`.
    pub ort_dylib: String,
    /// Fill an empty path from the set-up script's cache folder when the
    /// configuration is loaded (default on; `CAIRN_EMBEDDING__DISCOVER=false`
    /// turns it off).
    pub discover: bool,
    /// Where the two paths came from: set by [`CairnConfig::load`], never
    /// read from the configuration.
    #[serde(skip)]
    pub origin: EmbeddingOrigin,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            model_dir: String::new(),
            ort_dylib: String::new(),
            discover: true,
            origin: EmbeddingOrigin::default(),
        }
    }
}

/// Where each embedding path came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EmbeddingOrigin {
    /// Of `model_dir`.
    pub model_dir: PathOrigin,
    /// Of `ort_dylib`.
    pub ort_dylib: PathOrigin,
    /// The cache folder looked in, when anything was looked for.
    pub cache_dir: Option<PathBuf>,
}

/// Where one configured path came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PathOrigin {
    /// Neither configured nor found.
    #[default]
    Unset,
    /// From `cairn.toml`, a `CAIRN_EMBEDDING__*` variable or the embedder.
    Configured,
    /// Found in the set-up script's cache folder.
    Discovered,
}

/// The files a model folder must hold, as `scripts/setup-embeddings.sh`
/// installs them.
pub const MODEL_FILES: [&str; 5] = [
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

/// The model folder's name under `<cache>/models/`.
pub const MODEL_NAME: &str = "all-minilm-l6-v2";

/// Where `scripts/setup-embeddings.sh` installs: `$CAIRN_CACHE_DIR`, else
/// `$HOME/.cache/cairn` (the script's own rule); `None` without either.
pub fn embedding_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CAIRN_CACHE_DIR").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".cache/cairn"))
}

/// The model folder under `cache` if it holds every file of [`MODEL_FILES`].
///
/// ```
/// let cache = tempfile::tempdir()?;
/// assert_eq!(cairn::find_model_dir(cache.path()), None);
/// let dir = cache.path().join("models/all-minilm-l6-v2");
/// std::fs::create_dir_all(&dir)?;
/// for f in cairn::MODEL_FILES {
///     std::fs::write(dir.join(f), b"x")?;
/// }
/// assert_eq!(cairn::find_model_dir(cache.path()), Some(dir));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn find_model_dir(cache: &Path) -> Option<PathBuf> {
    let dir = cache.join("models").join(MODEL_NAME);
    MODEL_FILES
        .iter()
        .all(|f| dir.join(f).is_file())
        .then_some(dir)
}

/// ONNX Runtime under `<cache>/onnxruntime/`: the newest
/// `libonnxruntime.so.<version>` (the file the script installs; its
/// `libonnxruntime.so` link otherwise, or a macOS `libonnxruntime.dylib`).
///
/// ```
/// let cache = tempfile::tempdir()?;
/// let dir = cache.path().join("onnxruntime");
/// std::fs::create_dir_all(&dir)?;
/// assert_eq!(cairn::find_ort_dylib(cache.path()), None);
/// for v in ["1.9.0", "1.32.0", "1.24.1"] {
///     std::fs::write(dir.join(format!("libonnxruntime.so.{v}")), b"x")?;
/// }
/// assert_eq!(cairn::find_ort_dylib(cache.path()), Some(dir.join("libonnxruntime.so.1.32.0")));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn find_ort_dylib(cache: &Path) -> Option<PathBuf> {
    let dir = cache.join("onnxruntime");
    let version = |name: &str| -> Option<Vec<u64>> {
        let v = name.strip_prefix("libonnxruntime.so.")?;
        v.split('.').map(|n| n.parse().ok()).collect()
    };
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let v = version(&name)?;
            e.path().is_file().then_some((v, e.path()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, path)| path);
    newest.or_else(|| {
        ["libonnxruntime.so", "libonnxruntime.dylib"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
    })
}

impl EmbeddingConfig {
    /// Fills the empty paths from `cache` (see [`find_model_dir`] and
    /// [`find_ort_dylib`]) and records where each came from. With
    /// `discover` off, or no `cache`, only the origins are set.
    ///
    /// ```
    /// use cairn::{EmbeddingConfig, PathOrigin};
    /// let cache = tempfile::tempdir()?;
    /// let mut e = EmbeddingConfig { ort_dylib: "/opt/ort/libonnxruntime.so".into(), ..Default::default() };
    /// e.discover_in(Some(cache.path()));
    /// assert_eq!(e.origin.ort_dylib, PathOrigin::Configured);
    /// assert_eq!(e.origin.model_dir, PathOrigin::Unset); // nothing installed there
    /// assert!(e.model_dir.is_empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn discover_in(&mut self, cache: Option<&Path>) {
        let configured = |p: &str| {
            if p.is_empty() {
                PathOrigin::Unset
            } else {
                PathOrigin::Configured
            }
        };
        self.origin.model_dir = configured(&self.model_dir);
        self.origin.ort_dylib = configured(&self.ort_dylib);
        let Some(cache) = cache.filter(|_| self.discover) else {
            return;
        };
        if self.model_dir.is_empty() || self.ort_dylib.is_empty() {
            self.origin.cache_dir = Some(cache.to_owned());
        }
        if self.model_dir.is_empty()
            && let Some(dir) = find_model_dir(cache)
        {
            self.model_dir = dir.to_string_lossy().into_owned();
            self.origin.model_dir = PathOrigin::Discovered;
        }
        if self.ort_dylib.is_empty()
            && let Some(lib) = find_ort_dylib(cache)
        {
            self.ort_dylib = lib.to_string_lossy().into_owned();
            self.origin.ort_dylib = PathOrigin::Discovered;
        }
    }

    /// True when both paths are set (configured or discovered).
    pub fn is_set(&self) -> bool {
        !self.model_dir.is_empty() && !self.ort_dylib.is_empty()
    }
}

/// The memory tools' cross-surface rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Searches per caller per minute (0: no limit). Over HTTP with tokens
    /// a caller is the token and the `caller` name together: each agent of
    /// a gateway has its own budget, and `server.requests_per_minute`
    /// bounds the token as a whole.
    pub rate_per_minute: u32,
    /// Searches per caller per day (0: no limit).
    pub rate_per_day: u32,
    /// The search index's refresh interval: the least time between two
    /// indexing passes under a stream of writes, so about the longest a new
    /// turn waits to be searchable (10 to 60,000 ms; default 1,000, as
    /// [`cairn_memory::search::SearchService::REFRESH`]). Shorter costs a
    /// commit and a small segment to merge per workspace per pass.
    pub refresh_ms: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            rate_per_minute: 6,
            rate_per_day: 200,
            refresh_ms: cairn_memory::search::SearchService::REFRESH_MS,
        }
    }
}

/// The longest lease a cluster node may hold without renewing it.
const MAX_LEASE_MS: u64 = 3_600_000;

/// `value` quoted for an error message, cut after 64 characters.
fn shown(value: &str) -> String {
    match value.char_indices().nth(64) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
        None => format!("{value:?}"),
    }
}

/// cairn's whole configuration.
///
/// ```
/// let config = cairn::CairnConfig::default();
/// assert_eq!(config.server.listen, "127.0.0.1:7878");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CairnConfig {
    /// Where the store lives (sled), and the files each node keeps for
    /// itself on any backend (the policies' compile cache).
    pub data_dir: PathBuf,
    /// Which store holds the data: `[storage]` (`backend = "sled"`, the
    /// default, or `"postgres"` with `[storage.postgres] url`).
    pub storage: StorageConfig,
    /// Workspace used by the CLI when `--workspace` is not given.
    pub workspace: String,
    /// The memory core.
    pub memory: MemoryConfig,
    /// The HTTP server.
    pub server: ServerConfig,
    /// Assembly.
    pub assemble: AssembleConfig,
    /// Logging.
    pub log: LogConfig,
    /// The actor runtime: mailboxes, passivation, capture triggers.
    pub actors: ActorConfig,
    /// The embedding model.
    pub embedding: EmbeddingConfig,
    /// The memory tools' rules.
    pub search: SearchConfig,
    /// The policy plugins and the decision log.
    pub policies: PolicyConfig,
    /// Compaction: budget, tail, the `after_turn` trigger, the model summariser.
    pub compaction: crate::compaction::CompactionConfig,
    /// The optional model extraction pass (off: heuristic extraction only).
    pub extraction: crate::extraction::ExtractionConfig,
    /// Online erasure: how soon after a `forget` its bytes leave the store
    /// (`[erasure]`; docs/DURABILITY.md, *Erasure on disk*).
    pub erasure: crate::eraser::ErasureConfig,
}

impl Default for CairnConfig {
    fn default() -> Self {
        CairnConfig {
            data_dir: default_data_dir(),
            storage: StorageConfig::default(),
            workspace: "default".to_owned(),
            memory: MemoryConfig::default(),
            server: ServerConfig::default(),
            assemble: AssembleConfig::default(),
            log: LogConfig::default(),
            actors: ActorConfig::default(),
            embedding: EmbeddingConfig::default(),
            search: SearchConfig::default(),
            policies: PolicyConfig::default(),
            compaction: crate::compaction::CompactionConfig::default(),
            extraction: crate::extraction::ExtractionConfig::default(),
            erasure: crate::eraser::ErasureConfig::default(),
        }
    }
}

/// `$XDG_DATA_HOME/cairn`, else `$HOME/.local/share/cairn`, else `./cairn-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("cairn");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/cairn"),
        None => PathBuf::from("cairn-data"),
    }
}

impl CairnConfig {
    /// Loads the configuration: defaults, then `file` (required if given;
    /// otherwise `./cairn.toml` if it exists), then `CAIRN_*` variables;
    /// an embedding path left empty is then looked for where
    /// `scripts/setup-embeddings.sh` installs it (see
    /// [`EmbeddingConfig::discover_in`]).
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let defaults = config::Config::try_from(&CairnConfig::default())
            .map_err(|e| CairnError::ConfigLoad { source: e.into() })?;
        let mut builder = config::Config::builder().add_source(defaults);
        match file {
            Some(path) => {
                if !path.is_file() {
                    return Err(CairnError::Config(format!(
                        "config file {} does not exist",
                        path.display()
                    )));
                }
                builder = builder.add_source(config::File::from(path).required(true));
            }
            None => {
                builder = builder.add_source(config::File::with_name("cairn.toml").required(false));
            }
        }
        builder = builder.add_source(
            config::Environment::with_prefix("CAIRN")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true),
        );
        let mut config: CairnConfig = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| CairnError::ConfigLoad { source: e.into() })?;
        config.validate()?;
        config
            .embedding
            .discover_in(embedding_cache_dir().as_deref());
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        if !cairn_memory::tokens::ENCODINGS.contains(&self.memory.tokenizer.as_str()) {
            return Err(CairnError::Config(format!(
                "memory.tokenizer {:?} is unknown; use one of {}",
                self.memory.tokenizer,
                cairn_memory::tokens::ENCODINGS.join(", ")
            )));
        }
        if !(8..=1 << 20).contains(&self.memory.cache_mb) {
            return Err(CairnError::Config(format!(
                "memory.cache_mb {} is out of range; use 8 to 1048576 (MiB)",
                self.memory.cache_mb
            )));
        }
        if let Some(e) = &self.assemble.settings.encoding
            && !cairn_memory::tokens::ENCODINGS.contains(&e.as_str())
        {
            return Err(CairnError::Config(format!(
                "assemble.settings.encoding {e:?} is unknown; use one of {}",
                cairn_memory::tokens::ENCODINGS.join(", ")
            )));
        }
        self.server.validate()?;
        for (section, model) in [
            ("compaction.model", &self.compaction.model),
            ("extraction.model", &self.extraction.model),
        ] {
            if model.enabled
                && let Err(why) = model.check()
            {
                return Err(CairnError::Config(format!("{section}: {why}")));
            }
        }
        if !(10..=60_000).contains(&self.search.refresh_ms) {
            return Err(CairnError::Config(format!(
                "search.refresh_ms {} is out of range; use 10 to 60000",
                self.search.refresh_ms
            )));
        }
        if let Err(e) = self.assemble.settings.validate() {
            return Err(CairnError::Config(format!("[assemble.settings] {e}")));
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(CairnError::Config(format!(
                "log.format {:?} must be \"text\" or \"json\"",
                self.log.format
            )));
        }
        if self.storage.backend == StorageBackend::Postgres && self.storage.postgres.url.is_empty()
        {
            return Err(CairnError::Config(
                "storage.backend is \"postgres\" but storage.postgres.url is empty \
                 (CAIRN_STORAGE__POSTGRES__URL)"
                    .to_owned(),
            ));
        }
        if self.storage.postgres.pool_size == 0 || self.storage.postgres.connect_timeout_ms == 0 {
            return Err(CairnError::Config(
                "storage.postgres.pool_size and connect_timeout_ms must be greater than zero"
                    .to_owned(),
            ));
        }
        let cluster = &self.storage.cluster;
        if cluster.enabled() {
            if self.storage.backend != StorageBackend::Postgres {
                return Err(CairnError::Config(format!(
                    "storage.cluster.node is {} but storage.backend is {:?}: nodes of a cluster \
                     share a PostgreSQL database (storage.backend = \"postgres\")",
                    shown(&cluster.node),
                    self.storage.backend.as_str()
                )));
            }
            if !cluster
                .node
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                || cluster.node.len() > 48
            {
                return Err(CairnError::Config(format!(
                    "storage.cluster.node {}: use at most 48 lowercase letters, digits or '-'",
                    shown(&cluster.node)
                )));
            }
            if !(cluster.advertise.is_empty()
                || cluster.advertise.starts_with("http://")
                || cluster.advertise.starts_with("https://"))
            {
                return Err(CairnError::Config(format!(
                    "storage.cluster.advertise {}: the http:// or https:// URL other nodes \
                     reach this node at (CAIRN_STORAGE__CLUSTER__ADVERTISE), or empty for the \
                     address `cairn serve` listens on",
                    shown(&cluster.advertise)
                )));
            }
            if let Some(host) = crate::cluster::unspecified_host(&cluster.advertise) {
                return Err(CairnError::Config(format!(
                    "storage.cluster.advertise {}: {host} is an unspecified address that no \
                     other node can reach; name this node's reachable address",
                    shown(&cluster.advertise)
                )));
            }
            if cluster.lease_ms < 300 {
                return Err(CairnError::Config(format!(
                    "storage.cluster.lease_ms {} is too short: at least 300",
                    cluster.lease_ms
                )));
            }
            if cluster.lease_ms > MAX_LEASE_MS {
                return Err(CairnError::Config(format!(
                    "storage.cluster.lease_ms {} is too long: at most {MAX_LEASE_MS} (an hour; \
                     a dead node's workspaces wait this long for another node)",
                    cluster.lease_ms
                )));
            }
        }
        self.actors.validate().map_err(CairnError::Config)?;
        self.policies.validate().map_err(CairnError::Config)?;
        self.erasure.validate().map_err(CairnError::Config)?;
        if self.memory.limits.max_content_bytes == 0 || self.memory.limits.max_batch == 0 {
            return Err(CairnError::Config(
                "memory.limits values must be greater than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(node: &str, advertise: &str, lease_ms: u64) -> Result<()> {
        let mut config = CairnConfig::default();
        config.storage.backend = StorageBackend::Postgres;
        config.storage.postgres.url = "postgresql://cairn@127.0.0.1:5432/cairn".to_owned();
        config.storage.cluster.node = node.to_owned();
        config.storage.cluster.advertise = advertise.to_owned();
        config.storage.cluster.lease_ms = lease_ms;
        config.validate()
    }

    fn refusal(result: Result<()>) -> String {
        match result {
            Err(CairnError::Config(message)) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    /// Each cluster setting is checked, the error names it, and a huge value
    /// is not echoed whole.
    #[test]
    fn cluster_settings_are_checked_and_named() {
        assert!(cluster("n1", "", 3_000).is_ok());
        assert!(cluster("node-2", "https://10.0.0.5:7878", 300).is_ok());
        assert!(refusal(cluster("N1", "", 3_000)).contains("storage.cluster.node \"N1\""));
        let huge = "a".repeat(1 << 20);
        let message = refusal(cluster(&huge, "", 3_000));
        assert!(message.contains("storage.cluster.node"), "{message}");
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(refusal(cluster("n1", "ftp://x", 3_000)).contains("storage.cluster.advertise"));
        assert!(
            refusal(cluster("n1", "http://0.0.0.0:7878", 3_000))
                .contains("storage.cluster.advertise")
        );
        assert!(refusal(cluster("n1", "", 5)).contains("too short"));
        assert!(refusal(cluster("n1", "", u64::MAX)).contains("too long"));
        let mut sled = CairnConfig::default();
        sled.storage.cluster.node = "n1".to_owned();
        assert!(refusal(sled.validate()).contains("storage.backend is \"sled\""));
    }

    /// Issue 78: an enabled model endpoint over plain HTTP to another
    /// machine is a configuration error naming the section and the key
    /// that allows it.
    #[test]
    fn a_remote_plain_http_model_needs_allow_insecure_http() {
        let mut config = CairnConfig::default();
        config.extraction.model.url = "http://api.example.com/v1".to_owned();
        assert!(config.validate().is_ok(), "a disabled model is not checked");
        config.extraction.model.enabled = true;
        let message = refusal(config.validate());
        assert!(message.contains("extraction.model"), "{message}");
        assert!(message.contains("allow_insecure_http"), "{message}");
        config.extraction.model.allow_insecure_http = true;
        assert!(config.validate().is_ok());
        config.compaction.model.enabled = true;
        config.compaction.model.url = "http://10.1.2.3:8080/v1".to_owned();
        assert!(refusal(config.validate()).contains("compaction.model"));
        config.compaction.model.url = "http://127.0.0.1:8080/v1".to_owned();
        assert!(config.validate().is_ok());
    }

    /// The server's new settings are checked and named.
    #[test]
    fn server_origin_and_limit_settings_are_checked() {
        let server = |f: &dyn Fn(&mut ServerConfig)| {
            let mut config = CairnConfig::default();
            f(&mut config.server);
            config.validate()
        };
        assert!(server(&|s| s.allowed_origins = vec!["https://dash.example".to_owned()]).is_ok());
        for bad in [
            "*",
            "null",
            "dash.example",
            "https://dash.example/app",
            "ftp://x",
        ] {
            let message = refusal(server(&|s| s.allowed_origins = vec![bad.to_owned()]));
            assert!(
                message.contains("server.allowed_origins[0]"),
                "{bad}: {message}"
            );
        }
        assert!(refusal(server(&|s| s.token_refresh_ms = 5)).contains("server.token_refresh_ms"));
        assert!(
            refusal(server(&|s| s.max_forwarded_answer_bytes = 0))
                .contains("server.max_forwarded_answer_bytes")
        );
        assert!(server(&|s| s.failed_auth_per_minute = 0).is_ok());
    }

    /// The cross-conversation quiet period takes 0 (off) up to an update's
    /// 7-day life; outside that the error names the setting.
    #[test]
    fn the_cross_update_quiet_period_is_bounded() {
        let quiet = |minutes: i64| {
            let mut config = CairnConfig::default();
            config.actors.triggers.cross_update_quiet_minutes = minutes;
            config.validate()
        };
        for ok in [0, 60, 7 * 24 * 60] {
            assert!(quiet(ok).is_ok(), "{ok}");
        }
        for bad in [-1, 7 * 24 * 60 + 1, i64::MAX, i64::MIN] {
            let message = refusal(quiet(bad));
            assert!(
                message.contains("actors.triggers.cross_update_quiet_minutes"),
                "{message}"
            );
        }
    }
}
