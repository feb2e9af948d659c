//! cairn inside a Node process: the native addon behind the OpenClaw
//! plugin's `mode: "in-process"` (`adapters/openclaw/src/native.js` loads it
//! as `cairn.node`).
//!
//! Three things cross into JavaScript:
//!
//! - `open({ dataDir, configFile })` opens a `Store`: one [`cairn::Cairn`]
//!   on one data dir (sled locks a data dir per process, so one gateway
//!   process owns it);
//! - `store.call({ op, workspace, … })` runs one facade call (the ops are
//!   `request::Request`'s) and resolves to the answer `cairn serve` gives the
//!   same call over HTTP, as a plain JS value;
//! - `store.close()` flushes (the decision log's last records, the actors'
//!   pending work) and lets the store go.
//!
//! Threads. Facade calls block (they may fsync, embed, compile a policy),
//! so none runs on Node's JS thread: each is a napi `AsyncTask` on libuv's
//! worker pool (`UV_THREADPOOL_SIZE`, default 4) and returns a Promise. The
//! `Cairn` handle is a cheap clone, shared across calls; cairn's own actors
//! serialise what must be serial (one session's writes).
//!
//! Errors. A failed call rejects with a JS `Error` whose `code` is cairn's
//! stable error code and whose `status` is the HTTP status `cairn serve`
//! answers the same failure with, so the plugin handles both modes alike.
//!
//! The facade is the only door: this crate depends on `cairn` alone and
//! never takes a handle on the memory core or the policy host.

// napi-derive expands `#[napi]` into the FFI glue Node calls (exported
// `extern "C"` functions, raw `napi_value`s); there is no hand-written
// `unsafe` in this crate.
#![allow(unsafe_code)]
// In the crate's test build napi-derive leaves out the registration with
// Node, so the exported items look unused there; the tests cover
// `request.rs`, the conversion.
#![cfg_attr(test, allow(dead_code))]

mod request;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::{Cairn, CairnConfig};
use napi::bindgen_prelude::AsyncTask;
use napi::{Env, JsUnknown, Task};
use napi_derive::napi;
use parking_lot::RwLock;
use serde_json::Value;

use crate::request::Failure;

/// What [`open`] takes.
#[napi(object)]
pub(crate) struct OpenOptions {
    /// The data dir (created when missing).
    pub data_dir: String,
    /// A `cairn.toml` to read; without one, `CAIRN_*` variables and
    /// `./cairn.toml` apply as for the `cairn` command.
    pub config_file: Option<String>,
}

/// An open cairn in this process.
#[napi]
pub(crate) struct Store {
    cairn: Arc<RwLock<Option<Cairn>>>,
    data_dir: String,
}

/// Opens cairn on `options.dataDir` off the JS thread; resolves to a
/// [`Store`]. Rejects with `code` `data_dir_locked` (status 503) when
/// another process holds the data dir.
#[napi(ts_return_type = "Promise<Store>")]
pub(crate) fn open(options: OpenOptions) -> AsyncTask<Open> {
    AsyncTask::new(Open {
        data_dir: PathBuf::from(options.data_dir),
        config_file: options.config_file.map(PathBuf::from),
    })
}

// napi-derive takes `pub` methods only; the crate is a cdylib that Node
// loads, with no Rust callers to reach them.
#[allow(unreachable_pub)]
#[napi]
impl Store {
    /// The data dir this store has open.
    #[napi(getter)]
    pub fn data_dir(&self) -> String {
        self.data_dir.clone()
    }

    /// One facade call (`{ op, workspace, … }`); resolves to the HTTP API's
    /// answer of the same call.
    #[napi(ts_return_type = "Promise<any>")]
    pub fn call(&self, request: Value) -> AsyncTask<Call> {
        AsyncTask::new(Call {
            cairn: self.cairn.read().clone(),
            request: Some(request),
        })
    }

    /// Flushes and closes the store (later calls reject with `closed`).
    /// Calls already running finish first on their own handle.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Close> {
        AsyncTask::new(Close {
            cairn: self.cairn.write().take(),
        })
    }
}

/// The rejection of a failed call: an `Error` with `code` and `status`.
fn reject(env: Env, failure: Failure) -> napi::Error {
    let build = || -> napi::Result<napi::Error> {
        let mut error = env.create_error(napi::Error::from_reason(failure.message.clone()))?;
        error.set_named_property("name", env.create_string("CairnError")?)?;
        error.set_named_property("code", env.create_string(&failure.code)?)?;
        error.set_named_property("status", env.create_uint32(u32::from(failure.status))?)?;
        Ok(napi::Error::from(error.into_unknown()))
    };
    build().unwrap_or_else(|e| e)
}

/// Opens the store on a worker thread.
pub(crate) struct Open {
    data_dir: PathBuf,
    config_file: Option<PathBuf>,
}

fn open_cairn(data_dir: &Path, config_file: Option<&Path>) -> Result<Cairn, Failure> {
    let mut config = CairnConfig::load(config_file)?;
    config.data_dir = data_dir.to_owned();
    Cairn::open(config).map_err(|err| {
        let failure = Failure::from(err);
        // sled takes an exclusive lock on the data dir per process.
        if failure.message.contains("lock") {
            Failure::new(
                503,
                "data_dir_locked",
                format!(
                    "cairn's data dir {} is open in another process (in-process mode opens one \
                     data dir per process: the gateway's); {}",
                    data_dir.display(),
                    failure.message
                ),
            )
        } else {
            failure
        }
    })
}

impl Task for Open {
    type Output = Result<Cairn, Failure>;
    type JsValue = Store;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        Ok(open_cairn(&self.data_dir, self.config_file.as_deref()))
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<Store> {
        match output {
            Ok(cairn) => Ok(Store {
                cairn: Arc::new(RwLock::new(Some(cairn))),
                data_dir: self.data_dir.display().to_string(),
            }),
            Err(failure) => Err(reject(env, failure)),
        }
    }
}

/// One facade call on a worker thread.
pub(crate) struct Call {
    cairn: Option<Cairn>,
    request: Option<Value>,
}

impl Task for Call {
    type Output = Result<Value, Failure>;
    type JsValue = JsUnknown;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let Some(cairn) = &self.cairn else {
            return Ok(Err(Failure::new(
                503,
                "closed",
                "this cairn store is closed",
            )));
        };
        let request = self.request.take().unwrap_or(Value::Null);
        Ok(request::parse(request).and_then(|r| request::perform(cairn, r)))
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<JsUnknown> {
        match output {
            Ok(value) => env.to_js_value(&value),
            Err(failure) => Err(reject(env, failure)),
        }
    }
}

/// Flushes and drops the store on a worker thread.
pub(crate) struct Close {
    cairn: Option<Cairn>,
}

impl Task for Close {
    type Output = Result<(), Failure>;
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<Self::Output> {
        Ok(match self.cairn.take() {
            Some(cairn) => cairn.flush().map_err(Failure::from),
            None => Ok(()),
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<()> {
        output.map_err(|failure| reject(env, failure))
    }
}
