//! The runtime's error type.

use cairn_memory::MemoryError;

/// Result alias for the runtime.
pub type Result<T, E = CairnError> = std::result::Result<T, E>;

/// Everything the `cairn` facade can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CairnError {
    /// The memory core refused or failed (see [`MemoryError::code`]).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The configuration could not be read or is invalid.
    #[error("configuration: {0}")]
    Config(String),
}

impl CairnError {
    /// A stable machine-readable code (`snake_case`).
    ///
    /// ```
    /// use cairn::CairnError;
    /// assert_eq!(CairnError::Config("bad".into()).code(), "config");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            CairnError::Memory(e) => e.code(),
            CairnError::Config(_) => "config",
        }
    }

    /// True when the caller's input caused the error.
    pub fn is_caller_error(&self) -> bool {
        match self {
            CairnError::Memory(e) => e.is_caller_error(),
            CairnError::Config(_) => true,
        }
    }

    /// True when something addressed does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CairnError::Memory(e) if e.is_not_found())
    }
}
