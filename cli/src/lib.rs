//! The `cairn` command's library: the HTTP server ([`http`]), the MCP
//! server ([`mcp`]), the load
//! generator ([`loadgen`]), the retrieval evaluation ([`eval`]) and the
//! `MEMORY.md` briefing writer ([`brief`]).
//!
//! Everything here reaches memory through the [`cairn::Cairn`] facade and
//! nothing else: this package depends on `cairn`'s public API only, so the
//! compiler keeps every surface behind the same rules (actors, the
//! significance gate, the memory policy, lineage, redaction, limits).

pub mod brief;
mod client;
pub mod eval;
pub mod http;
pub mod loadgen;
pub mod mcp;

#[cfg(test)]
mod tests {
    /// Every surface reaches memory through `cairn::Cairn`'s methods: no
    /// source file here asks the facade for a subsystem (the policy
    /// plugins, the memory core, the actors, the `testing` handles, which
    /// only this package's tests may enable).
    #[test]
    fn surfaces_reach_memory_through_the_facade() {
        fn sources(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            let Ok(read) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in read.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    sources(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        assert!(files.len() > 10, "{files:?}");
        let side_doors = [
            concat!(".policies", "()"),
            concat!(".memory", "()"),
            concat!(".actors", "()"),
            concat!("cairn::", "testing"),
        ];
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            for door in side_doors {
                assert!(!text.contains(door), "{} uses {door}", file.display());
            }
        }
    }
}
