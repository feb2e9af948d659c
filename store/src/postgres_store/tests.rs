//! The PostgreSQL backend on a real server: each test makes its own
//! database on the cluster `CAIRN_TEST_POSTGRES_URL` names (an admin URL,
//! `postgresql://user@host:port/postgres`; `scripts/dev.sh test` starts one
//! with `scripts/pg-cluster.sh`). Without it, the tests that need a server
//! say so and pass; the unreachable-server test needs none.

use super::*;
use crate::{Leases, SledStore};

use crate::testing::{execute, with_database};

/// The admin URL of the test cluster, or `None` (with the reason printed).
fn admin_url(test: &str) -> Option<String> {
    let url = crate::testing::postgres_admin_url();
    if url.is_none() {
        eprintln!("{test}: skipped, CAIRN_TEST_POSTGRES_URL is not set (no PostgreSQL server)");
    }
    url
}

/// The `bigint` `sql` answers on the database at `url`.
fn query_count(url: &str, sql: &str) -> anyhow::Result<i64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        let task = tokio::spawn(connection);
        let count: i64 = client.query_one(sql, &[]).await?.try_get(0)?;
        drop(client);
        task.await??;
        Ok(count)
    })
}

/// A fresh, empty database on the test cluster.
fn fresh_database(test: &str) -> anyhow::Result<Option<PostgresConfig>> {
    let Some(admin) = admin_url(test) else {
        return Ok(None);
    };
    let name = format!(
        "cairn_unit_{}",
        ulid::Ulid::new().to_string().to_lowercase()
    );
    execute(&admin, &format!("CREATE DATABASE {name}"))?;
    Ok(Some(PostgresConfig {
        url: with_database(&admin, &name),
        ..PostgresConfig::default()
    }))
}

#[test]
fn the_url_of_a_fresh_database_keeps_the_rest() {
    assert_eq!(
        with_database("postgresql://u@127.0.0.1:5/postgres?x=1", "t"),
        "postgresql://u@127.0.0.1:5/t?x=1"
    );
    assert_eq!(
        with_database("postgresql://u@127.0.0.1:5", "t"),
        "postgresql://u@127.0.0.1:5/t"
    );
    assert_eq!(with_database("host=/tmp", "t"), "host=/tmp dbname=t");
}

/// Every scan answers exactly what sled answers, on keys chosen around the
/// edges of bytewise order (NUL, 0x7f/0x80, 0xff runs, a key that is a
/// prefix of another), with a neighbouring collection that must not leak in.
#[test]
fn scans_match_sled_byte_for_byte() -> anyhow::Result<()> {
    let Some(config) = fresh_database("scans_match_sled_byte_for_byte")? else {
        return Ok(());
    };
    let pg = PostgresStore::connect(&config)?;
    let dir = tempfile::tempdir()?;
    let sled = SledStore::open(dir.path())?;
    let keys: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0, 0],
        vec![0, 255],
        vec![1],
        vec![0x7f],
        vec![0x80],
        vec![0x80, 0],
        b"a".to_vec(),
        b"a\0".to_vec(),
        b"a\0b".to_vec(),
        b"ab".to_vec(),
        b"B".to_vec(),
        vec![255],
        vec![255, 0],
        vec![255, 255],
        vec![255, 255, 1],
        vec![255, 255, 255],
    ];
    let stores: [&dyn Store; 2] = [&pg, &sled];
    for store in stores {
        let ws = store.workspace("acme")?;
        let mut batch = WriteBatch::default();
        for (i, key) in keys.iter().enumerate() {
            batch.put(Collection::Turns, key.clone(), vec![i as u8]);
            // The same keys in the collections tagged just below and above.
            batch.put(Collection::State, key.clone(), b"state".to_vec());
            batch.put(Collection::Sessions, key.clone(), b"sessions".to_vec());
        }
        ws.apply(batch)?;
        store.sync()?;
    }
    let (p, s) = (pg.workspace("acme")?, sled.workspace("acme")?);
    let prefixes: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0x7f],
        vec![0x80],
        b"a".to_vec(),
        b"a\0".to_vec(),
        vec![255],
        vec![255, 255],
        vec![255, 255, 255],
        vec![255, 255, 255, 255],
        b"zz".to_vec(),
    ];
    for prefix in &prefixes {
        let c = Collection::Turns;
        assert_eq!(
            p.scan_prefix(c, prefix)?,
            s.scan_prefix(c, prefix)?,
            "{prefix:?}"
        );
        for limit in [0, 1, 2, 100] {
            assert_eq!(
                p.scan_prefix_rev(c, prefix, limit)?,
                s.scan_prefix_rev(c, prefix, limit)?,
                "rev {prefix:?} {limit}"
            );
            for start in [&b""[..], &[0], &[255], b"\0b"] {
                assert_eq!(
                    p.scan_prefix_from(c, prefix, start, limit)?,
                    s.scan_prefix_from(c, prefix, start, limit)?,
                    "from {prefix:?} {start:?} {limit}"
                );
            }
        }
        assert_eq!(
            p.last_with_prefix(c, prefix)?,
            s.last_with_prefix(c, prefix)?,
            "{prefix:?}"
        );
    }
    // The whole collection, in sled's order, holds only its own pairs.
    let all = p.scan_prefix(Collection::Turns, &[])?;
    assert_eq!(all.len(), keys.len());
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(all.into_iter().map(|(k, _)| k).collect::<Vec<_>>(), sorted);
    assert_eq!(p.get(Collection::Turns, &[255, 255])?, Some(vec![15]));
    assert_eq!(p.get(Collection::Turns, b"nope")?, None);
    Ok(())
}

/// A batch is one transaction: when its last statement fails (a trigger
/// refuses one key), the deletes and puts before it are rolled back.
#[test]
fn a_failing_batch_leaves_nothing() -> anyhow::Result<()> {
    let Some(config) = fresh_database("a_failing_batch_leaves_nothing")? else {
        return Ok(());
    };
    let store = PostgresStore::connect(&config)?;
    let ws = store.workspace("acme")?;
    let mut first = WriteBatch::default();
    first.put(Collection::State, b"kept".to_vec(), b"1".to_vec());
    ws.apply(first)?;
    execute(
        &config.url,
        "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
         BEGIN
             IF NEW.key = 'poison'::bytea THEN RAISE EXCEPTION 'poisoned key'; END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql;
         CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON cairn_kv
             FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )?;
    let mut batch = WriteBatch::default();
    batch.delete(Collection::State, b"kept".to_vec());
    batch.put(Collection::State, b"new".to_vec(), b"2".to_vec());
    batch.put(Collection::Turns, b"poison".to_vec(), b"3".to_vec());
    let err = ws
        .apply(batch)
        .err()
        .context("the poisoned batch was applied")?;
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("poisoned key"), "{err}");
    assert_eq!(ws.get(Collection::State, b"kept")?, Some(b"1".to_vec()));
    assert_eq!(ws.get(Collection::State, b"new")?, None);
    assert_eq!(ws.scan_prefix(Collection::Turns, &[])?, Vec::new());
    // The last operation on a key wins, as in a sled batch.
    let mut batch = WriteBatch::default();
    batch.put(Collection::State, b"k".to_vec(), b"a".to_vec());
    batch.delete(Collection::State, b"k".to_vec());
    batch.put(Collection::State, b"j".to_vec(), b"a".to_vec());
    batch.delete(Collection::State, b"j".to_vec());
    batch.put(Collection::State, b"j".to_vec(), b"b".to_vec());
    ws.apply(batch)?;
    assert_eq!(ws.get(Collection::State, b"k")?, None);
    assert_eq!(ws.get(Collection::State, b"j")?, Some(b"b".to_vec()));
    Ok(())
}

/// A database migrated by a newer cairn is refused, naming both versions;
/// nodes starting at once migrate it once, and one of them holds it.
#[test]
fn migrations_run_once_and_a_newer_schema_is_refused() -> anyhow::Result<()> {
    let Some(config) = fresh_database("migrations_run_once_and_a_newer_schema_is_refused")? else {
        return Ok(());
    };
    let starts = std::thread::scope(|s| {
        let starts: Vec<_> = (0..4)
            .map(|_| s.spawn(|| PostgresStore::connect(&config)))
            .collect();
        starts
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a start panicked")))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let (opened, refused): (Vec<_>, Vec<_>) = starts.into_iter().partition(Result::is_ok);
    assert_eq!(opened.len(), 1, "{refused:?}");
    for err in refused.into_iter().filter_map(Result::err) {
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    }
    let store = opened.into_iter().next().context("one start")??;
    assert_eq!(store.schema_version()?, SCHEMA_VERSION);
    store.meta_put(b"m", b"1")?;
    drop(store);
    // A second start on a migrated database changes nothing.
    let again = PostgresStore::connect(&config)?;
    assert_eq!(again.schema_version()?, SCHEMA_VERSION);
    assert_eq!(again.meta_get(b"m")?, Some(b"1".to_vec()));
    drop(again);

    let newer = SCHEMA_VERSION + 1;
    execute(
        &config.url,
        &format!("INSERT INTO cairn_migrations (version) VALUES ({newer})"),
    )?;
    let err = PostgresStore::connect(&config)
        .err()
        .context("a newer schema was accepted")?;
    assert!(
        matches!(err, StoreError::SchemaTooNew { database, binary } if database == newer && binary == SCHEMA_VERSION),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("version {newer}"))
            && message.contains(&format!("({SCHEMA_VERSION})")),
        "{message}"
    );
    assert!(!err.is_retryable());
    Ok(())
}

/// One process has a database open at a time, as one has a sled data dir:
/// a second is refused while the first lives, and may open it once the
/// first is gone; a lost lock connection is taken again before a write.
#[test]
fn one_process_writes_a_database_at_a_time() -> anyhow::Result<()> {
    let Some(config) = fresh_database("one_process_writes_a_database_at_a_time")? else {
        return Ok(());
    };
    let first = PostgresStore::connect(&config)?;
    let err = PostgresStore::connect(&config)
        .err()
        .context("a second process opened the database")?;
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("cairn serve"), "{err}");
    // The server ends the lock's connection (as a restart would): a write,
    // once the client has seen the connection close, takes the lock again
    // on a new one.
    let holders = "SELECT count(*) FROM pg_locks
                   WHERE locktype = 'advisory' AND granted
                     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    assert_eq!(query_count(&config.url, holders)?, 1);
    let holder = |url: &str| {
        query_count(
            url,
            "SELECT coalesce(min(pid), 0)::bigint FROM pg_locks
             WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
    };
    let before = holder(&config.url)?;
    execute(
        &config.url,
        &format!("SELECT pg_terminate_backend({before})"),
    )?;
    let ws = first.workspace("acme")?;
    let mut batch = WriteBatch::default();
    batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
    let mut retaken = false;
    for _ in 0..200 {
        // The terminated backend may still show its lock for a moment:
        // retaken means held again, by another backend.
        let now = holder(&config.url)?;
        if now != 0 && now != before && query_count(&config.url, holders)? == 1 {
            retaken = true;
            break;
        }
        // Fails while the lock's connection is known lost and not yet
        // taken again; succeeds (and takes it) otherwise.
        let _ = ws.apply(batch.clone());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(retaken, "no write took the lock again");
    ws.apply(batch)?;
    assert!(matches!(
        PostgresStore::connect(&config),
        Err(StoreError::Locked { .. })
    ));
    drop((ws, first));
    let next = PostgresStore::connect(&config)?;
    assert_eq!(
        next.workspace("acme")?.get(Collection::State, b"k")?,
        Some(b"v".to_vec())
    );
    Ok(())
}

/// Dropping a workspace removes every pair in one statement; a handle
/// opened before fails to write (it does not bring the workspace back).
#[test]
fn drop_workspace_removes_everything() -> anyhow::Result<()> {
    let Some(config) = fresh_database("drop_workspace_removes_everything")? else {
        return Ok(());
    };
    let store = PostgresStore::connect(&config)?;
    let (a, b) = (store.workspace("a")?, store.workspace("b")?);
    let sys = store.system("decisions")?;
    for ws in [&a, &b, &sys] {
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, b"k".to_vec(), b"1".to_vec());
        batch.put(Collection::Turns, b"t".to_vec(), b"2".to_vec());
        ws.apply(batch)?;
    }
    assert_eq!(store.workspaces()?, vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(sys.workspace(), "sys:decisions");
    assert!(store.drop_workspace("a")?);
    assert!(!store.drop_workspace("a")?);
    assert!(!store.has_workspace("a")?);
    assert!(store.has_workspace("b")?);
    assert_eq!(store.workspaces()?, vec!["b".to_owned()]);
    assert_eq!(a.get(Collection::State, b"k")?, None);
    let mut late = WriteBatch::default();
    late.put(Collection::State, b"late".to_vec(), b"1".to_vec());
    assert!(a.apply(late).is_err());
    assert!(!store.has_workspace("a")?);
    assert_eq!(b.get(Collection::Turns, b"t")?, Some(b"2".to_vec()));
    assert_eq!(sys.get(Collection::Turns, b"t")?, Some(b"2".to_vec()));
    // Reopened, the workspace is empty.
    let again = store.workspace("a")?;
    assert_eq!(again.scan_prefix(Collection::State, &[])?, Vec::new());
    // The metadata space.
    store.meta_put(b"x:1", b"1")?;
    store.meta_put(b"x:2", b"2")?;
    store.meta_put(b"y", b"3")?;
    store.meta_delete(b"x:2")?;
    assert_eq!(store.meta_get(b"y")?, Some(b"3".to_vec()));
    assert_eq!(
        store.meta_scan_prefix(b"x:")?,
        vec![(b"x:1".to_vec(), b"1".to_vec())]
    );
    Ok(())
}

/// A server that is not there is a retryable, typed error, in about the
/// connect timeout, not a hang or a panic.
#[test]
fn an_unreachable_database_is_a_retryable_error() -> anyhow::Result<()> {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let config = PostgresConfig {
        url: format!("postgresql://cairn@127.0.0.1:{port}/cairn"),
        connect_timeout_ms: 500,
        ..PostgresConfig::default()
    };
    let started = std::time::Instant::now();
    let err = PostgresStore::connect(&config)
        .err()
        .context("connected to nothing")?;
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        matches!(err, StoreError::Unavailable { op: "migrate", .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let bad = PostgresConfig {
        url: "postgresql://[::1".to_owned(),
        ..PostgresConfig::default()
    };
    let err = PostgresStore::connect(&bad)
        .err()
        .context("a bad URL was accepted")?;
    assert!(
        matches!(err, StoreError::Config(_)) && !err.is_retryable(),
        "{err:?}"
    );
    Ok(())
}

/// The store works when called from inside a tokio runtime (an actix
/// arbiter, an HTTP worker), where a blocking client would panic, and is
/// dropped there without blocking.
#[test]
fn calls_from_inside_a_tokio_runtime_work() -> anyhow::Result<()> {
    let Some(config) = fresh_database("calls_from_inside_a_tokio_runtime_work")? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let store = PostgresStore::connect(&config)?;
        let ws = store.workspace("acme")?;
        let mut batch = WriteBatch::default();
        batch.put(Collection::State, b"k".to_vec(), b"v".to_vec());
        ws.apply(batch)?;
        assert_eq!(ws.get(Collection::State, b"k")?, Some(b"v".to_vec()));
        drop((ws, store));
        Ok(())
    })
}

use anyhow::Context as _;

/// A node of a cluster with a lease of `lease_ms`.
fn node(config: &PostgresConfig, name: &str, lease_ms: u64) -> Result<PostgresStore, StoreError> {
    PostgresStore::connect_node(
        config,
        &ClusterConfig {
            node: name.to_owned(),
            advertise: format!("http://{name}.invalid:1"),
            lease_ms,
        },
    )
}

fn one_put(key: &[u8]) -> WriteBatch {
    let mut batch = WriteBatch::default();
    batch.put(Collection::State, key.to_vec(), b"v".to_vec());
    batch
}

/// Nodes share the database, and a process outside the cluster is kept
/// out while one runs (and the other way round).
#[test]
fn cluster_nodes_share_the_database_and_keep_others_out() -> anyhow::Result<()> {
    let Some(config) = fresh_database("cluster_nodes_share_the_database_and_keep_others_out")?
    else {
        return Ok(());
    };
    let a = node(&config, "a", 3_000)?;
    let b = node(&config, "b", 3_000)?;
    let err = PostgresStore::connect(&config)
        .err()
        .context("a lone process opened a cluster's database")?;
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    drop((a, b));
    let alone = PostgresStore::connect(&config)?;
    let err = node(&config, "c", 3_000)
        .err()
        .context("a node joined a database a lone process has open")?;
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    drop(alone);
    Ok(())
}

/// Only the lease holder writes a workspace; the token is checked in the
/// write's own transaction, so a holder that was paused past its lease and
/// lost it to another node cannot write afterwards (its write is fenced off
/// and leaves nothing), while the new owner writes.
#[test]
fn a_former_owner_is_fenced_off_after_a_take_over() -> anyhow::Result<()> {
    let Some(config) = fresh_database("a_former_owner_is_fenced_off_after_a_take_over")? else {
        return Ok(());
    };
    let a = node(&config, "a", 400)?;
    let b = node(&config, "b", 400)?;
    a.heartbeat("http://a.invalid:1")?;
    let nodes = b.heartbeat("http://b.invalid:1")?;
    assert_eq!(
        nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(nodes.iter().all(|n| n.live), "{nodes:?}");

    // Nobody holds it: nobody writes it.
    let on_a = a.workspace("acme")?;
    let err = on_a.apply(one_put(b"k0")).err().context("wrote unowned")?;
    assert!(
        matches!(err, StoreError::NotOwner { .. }) && err.is_not_owner(),
        "{err:?}"
    );
    assert!(!a.serves("acme"));

    let token = a.acquire("acme")?.context("a free lease was refused")?;
    assert_eq!(token, 1);
    assert!(a.serves("acme") && !b.serves("acme"));
    assert_eq!(b.acquire("acme")?, None, "a current lease was taken");
    on_a.apply(one_put(b"k1"))?;
    assert_eq!(a.renew()?, Vec::<String>::new());

    // `a` pauses: no renewal; its lease expires and `b` takes over.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let taken = b.acquire("acme")?.context("an expired lease was refused")?;
    assert_eq!(taken, 2, "the token grows at every change of hands");
    // `a` wakes up and writes with its old token: fenced, nothing written.
    let err = on_a
        .apply(one_put(b"k2"))
        .err()
        .context("a stale token wrote")?;
    assert!(
        matches!(err, StoreError::Fenced { token: 1, .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert!(!a.serves("acme"), "a fenced write drops the lease");
    let on_b = b.workspace("acme")?;
    assert_eq!(on_b.get(Collection::State, b"k2")?, None);
    assert_eq!(on_b.get(Collection::State, b"k1")?, Some(b"v".to_vec()));
    on_b.apply(one_put(b"k3"))?;
    // Renewing tells `a` nothing is left; `b` keeps it.
    assert_eq!(a.renew()?, Vec::<String>::new());
    assert_eq!(b.renew()?, Vec::<String>::new());
    let leases = a.list()?;
    assert_eq!(leases.len(), 1);
    assert_eq!((leases[0].owner.as_str(), leases[0].token), ("b", 2));
    assert!(leases[0].current());

    // A graceful leave frees the lease at once; the next owner's token is
    // greater still.
    b.leave()?;
    assert_eq!(a.acquire("acme")?, Some(3));
    assert_eq!(a.nodes()?.len(), 1, "the leaving node's row is gone");
    // Dropping a workspace is a write too: fenced for a non-owner.
    let err = b
        .drop_workspace("acme")
        .err()
        .context("a non-owner dropped it")?;
    assert!(err.is_not_owner(), "{err:?}");
    assert!(a.drop_workspace("acme")?);
    Ok(())
}

/// A write in flight when another node takes over either commits before the
/// take-over (and the new owner reads it) or is fenced off: the take-over
/// waits for the share lock the write holds on the lease row.
#[test]
fn a_take_over_waits_for_a_write_in_flight() -> anyhow::Result<()> {
    let Some(config) = fresh_database("a_take_over_waits_for_a_write_in_flight")? else {
        return Ok(());
    };
    let a = node(&config, "a", 300)?;
    let b = node(&config, "b", 300)?;
    a.acquire("acme")?.context("a free lease was refused")?;
    let on_a = a.workspace("acme")?;
    let on_b = b.workspace("acme")?;
    std::thread::sleep(std::time::Duration::from_millis(350));
    let mut committed = 0;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let writer = s.spawn(|| {
            (0..200u32)
                .map(|i| on_a.apply(one_put(&i.to_be_bytes())).is_ok())
                .take_while(|ok| *ok)
                .count()
        });
        let taker = s.spawn(|| b.acquire("acme"));
        committed = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the writer panicked"))?;
        let token = taker
            .join()
            .map_err(|_| anyhow::anyhow!("the taker panicked"))??;
        assert_eq!(token, Some(2));
        Ok(())
    })?;
    // After the take-over `a` writes nothing more.
    let err = on_a
        .apply(one_put(b"late"))
        .err()
        .context("a stale token wrote")?;
    assert!(err.is_not_owner(), "{err:?}");
    // Every write `a` was told succeeded is there for `b`; none after.
    let stored = on_b.scan_prefix(Collection::State, b"")?;
    assert_eq!(stored.len(), committed, "{committed} acknowledged");
    for (i, (key, _)) in stored.iter().enumerate() {
        assert_eq!(key.as_slice(), (i as u32).to_be_bytes());
    }
    Ok(())
}
