//! A real PgBouncer (Debian's `pgbouncer`, which `scripts/test` installs) in transaction mode in front of the
//! tests' PostgreSQL server, for the tests of working behind a pooler: what many managed PostgreSQL offerings put
//! in front of the database, and where a session is not a connection.
//!
//! Each test starts its own, on a free port, with a fallback `*` database (every database name is passed on to
//! the server of `SCRINALIA_TEST_PG`), so a fresh test database needs no edit of its configuration.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::Path,
    time::Duration,
};

use crate::{Process, free_port, postgres_admin_url};

/// The binary: Debian installs it outside `PATH` for most users.
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A running PgBouncer in transaction mode; stopped when dropped.
pub struct PgBouncer {
    /// Where it listens.
    pub port: u16,
    process: Process,
    _dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer in transaction mode with its files in a folder of its own, and waits until it accepts
    /// connections.
    pub async fn start() -> Self {
        Self::with_pool_size(20).await
    }

    /// As [`PgBouncer::start`], with `pool_size` server connections per database and user: fewer than its
    /// clients makes every transaction likely to land on a server connection another client used last.
    pub async fn with_pool_size(pool_size: u32) -> Self {
        assert!(
            Path::new(PGBOUNCER).exists(),
            "The pooler tests need Debian's pgbouncer ({PGBOUNCER}): scripts/test installs it, or run \
             `apt-get install pgbouncer`"
        );
        let (host, server_port, user) = server();
        let port = free_port();
        // PgBouncer refuses to run as root; as root it is told to become `postgres` (`-u`), which must then be
        // able to read its files: a folder of its own, readable by all, not the test's private scratch folder.
        let folder = tempfile::Builder::new().prefix("scrinalia-pgbouncer-").tempdir().expect("a folder");
        let dir = folder.path().to_owned();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("open the folder");
        std::fs::write(dir.join("userlist.txt"), format!("\"{user}\" \"\"\n")).expect("write userlist.txt");
        // `ignore_startup_parameters`: sqlx sends `extra_float_digits` (and `options` when set) at start-up,
        // which PgBouncer refuses unless told to ignore them.
        let ini = format!(
            "[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {userlist}\n\
             pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits,options\n",
            userlist = dir.join("userlist.txt").display(),
        );
        let ini_path = dir.join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).expect("write pgbouncer.ini");
        for file in ["userlist.txt", "pgbouncer.ini"] {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        let ini_arg = ini_path.display().to_string();
        let as_root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let args: Vec<&str> = if as_root { vec!["-u", "postgres", &ini_arg] } else { vec![&ini_arg] };
        let process =
            Process::start(Path::new(PGBOUNCER), "pgbouncer", &dir, &args, &[]).unwrap_or_else(|e| panic!("{e:#}"));
        let started = tokio::time::Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen on {port} within 10 s:\n{}",
                process.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { port, process, _dir: folder }
    }

    /// `url` (a test database's direct URL) with its host and port replaced by this pooler's.
    pub fn url_of(&self, url: &str) -> String {
        let (scheme_user, rest) = url.split_once('@').expect("a URL with a user");
        let (_, path) = rest.split_once('/').expect("a URL with a database");
        format!("{scheme_user}@127.0.0.1:{}/{path}", self.port)
    }

    /// What PgBouncer logged.
    pub fn output(&self) -> String {
        self.process.output()
    }
}

/// The host, port and user of the tests' server.
fn server() -> (String, u16, String) {
    let url = postgres_admin_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let (user, host) = rest.split_once('@').unwrap_or(("postgres", rest));
    let user = user.split(':').next().unwrap_or("postgres").to_owned();
    let host = host.split('/').next().unwrap_or("127.0.0.1");
    let (host, port) = host.split_once(':').map_or((host, 5432), |(h, p)| (h, p.parse().unwrap_or(5432)));
    (host.to_owned(), port, user)
}
