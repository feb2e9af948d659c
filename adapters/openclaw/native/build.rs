//! Sets up linking for a Node addon (on Linux: nothing to add; on macOS:
//! the napi symbols are resolved by the loading `node`).

fn main() {
    napi_build::setup();
}
