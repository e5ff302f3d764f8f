//! Bearer tokens: read from a token file (one token per line, each a
//! client with its own session quota), generated with mode 0600 when the
//! file does not exist.
//!
//! Every route needs a token, `GET /v1/health` and `GET /metrics`
//! included, unless the operator opens those two ([`Auth::with_open_metrics`],
//! `[serve] open_metrics` or `--open-metrics`), which only a loopback bind
//! allows. Closed by default: health tells the version and the session
//! counts, metrics the load, the outcomes and the errors of every client,
//! and a token costs a scraper nothing (Prometheus sends one from
//! `authorization.credentials_file`). Open on loopback is for a local
//! scraper or health check that cannot send one: only this machine's users
//! reach it.

use std::io::Write;
use std::path::{Path, PathBuf};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// Why the tokens could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file could not be read or created.
    #[error("cannot read or create the token file {path}: {source}")]
    Io {
        /// The token file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The token file (given) has no non-blank line.
    #[error("the token file {0} holds no token")]
    Empty(PathBuf),
    /// The token file is group- or world-accessible.
    #[error("the token file {path} is readable by other users (mode {mode:o}); chmod 600 it")]
    Permissions {
        /// The token file.
        path: PathBuf,
        /// Its file mode, as `stat` reports it.
        mode: u32,
    },
}

/// Who a request comes from: the name of its token (`token-N`, by line), or
/// `anonymous` when auth is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client(pub String);

/// The accepted tokens (`None`: auth off, loopback only), and whether
/// health and metrics answer without one.
#[derive(Debug, Clone)]
pub struct Auth {
    /// SHA-256 of each token, with its client name.
    tokens: Option<Vec<([u8; 32], Client)>>,
    /// `GET /v1/health` and `GET /metrics` need no token (loopback only).
    open_metrics: bool,
}

impl Auth {
    /// No authentication (refused by the server for non-loopback binds).
    pub fn disabled() -> Self {
        Self {
            tokens: None,
            open_metrics: false,
        }
    }

    /// Whether requests must carry a token.
    pub fn is_enabled(&self) -> bool {
        self.tokens.is_some()
    }

    /// Let `GET /v1/health` and `GET /metrics` answer without a token
    /// (`open`), for a local scraper or health check; the server then
    /// refuses to start on a non-loopback address. Default: closed (see
    /// the module docs for why).
    pub fn with_open_metrics(mut self, open: bool) -> Self {
        self.open_metrics = open;
        self
    }

    /// Whether health and metrics answer without a token.
    pub fn metrics_open(&self) -> bool {
        self.open_metrics
    }

    /// Check a request for `GET /v1/health` or `GET /metrics`: free when
    /// they are open (or auth is off), else as [`Auth::check`].
    pub fn check_metrics(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.open_metrics {
            return Ok(());
        }
        self.check(headers).map(drop)
    }

    /// Tokens from `path`, creating it with one fresh random token (mode
    /// 0600) when it does not exist. Returns whether it was created.
    pub fn from_file(path: &Path) -> Result<(Self, bool), AuthError> {
        let io = |source| AuthError::Io {
            path: path.to_path_buf(),
            source,
        };
        let created = if path.exists() {
            false
        } else {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io)?;
            }
            write_new_token(path).map_err(io)?;
            true
        };
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(path).map_err(io)?.permissions().mode()
        };
        if mode & 0o077 != 0 {
            return Err(AuthError::Permissions {
                path: path.to_path_buf(),
                mode: mode & 0o777,
            });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        let tokens: Vec<([u8; 32], Client)> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .enumerate()
            .map(|(i, t)| (digest(t), Client(format!("token-{}", i + 1))))
            .collect();
        if tokens.is_empty() {
            return Err(AuthError::Empty(path.to_path_buf()));
        }
        Ok((
            Self {
                tokens: Some(tokens),
                open_metrics: false,
            },
            created,
        ))
    }

    /// The client a request's `Authorization: Bearer` header names.
    pub fn check(&self, headers: &HeaderMap) -> Result<Client, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(Client("anonymous".into()));
        };
        let given = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .ok_or(ApiError::Unauthorized)?;
        let d = digest(given);
        // Compare digests in full every time (no early exit on a match).
        let mut found = None;
        for (t, client) in tokens {
            let same = t
                .iter()
                .zip(d.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same {
                found = Some(client.clone());
            }
        }
        found.ok_or(ApiError::Unauthorized)
    }
}

/// The token of an `Authorization` header value `Bearer TOKEN`: the scheme
/// is matched case-insensitively (RFC 7235: `bearer`, `BEARER`), the token
/// exactly; spaces around the token are ignored. `None` for another scheme
/// or no token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Write a 256-bit random token, hex, to a new file readable only by its owner.
fn write_new_token(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let bytes: [u8; 32] = rand::random();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_private_and_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/serve.token");
        let (auth, created) = Auth::from_file(&path).unwrap();
        assert!(created && auth.is_enabled());
        let token = std::fs::read_to_string(&path).unwrap();
        let mut headers = HeaderMap::new();
        assert!(auth.check(&headers).is_err());
        headers.insert(
            "authorization",
            format!("Bearer {}", token.trim()).parse().unwrap(),
        );
        assert_eq!(auth.check(&headers).unwrap(), Client("token-1".into()));
        headers.insert("authorization", "Bearer nope".parse().unwrap());
        assert!(auth.check(&headers).is_err());
        let (_, created) = Auth::from_file(&path).unwrap();
        assert!(!created);
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_exact() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("BeArEr AbC"), Some("AbC"));
        for bad in [
            "Basic abc",
            "Bearer",
            "Bearer ",
            "Bearerabc",
            "Bear abc",
            "",
        ] {
            assert_eq!(bearer_token(bad), None, "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            writeln!(f, "Secret-Token").unwrap();
        }
        let (auth, _) = Auth::from_file(&path).unwrap();
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", value.parse().unwrap());
            auth.check(&headers)
        };
        for ok in [
            "Bearer Secret-Token",
            "bearer Secret-Token",
            "BEARER Secret-Token",
        ] {
            assert_eq!(with(ok).unwrap(), Client("token-1".into()), "{ok}");
        }
        for bad in [
            "Bearer secret-token",
            "BEARER SECRET-TOKEN",
            "Basic Secret-Token",
        ] {
            assert!(with(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn health_and_metrics_need_the_token_unless_opened() {
        let dir = tempfile::tempdir().unwrap();
        let (auth, _) = Auth::from_file(&dir.path().join("t")).unwrap();
        let none = HeaderMap::new();
        assert!(matches!(
            auth.check_metrics(&none),
            Err(ApiError::Unauthorized)
        ));
        let mut wrong = HeaderMap::new();
        wrong.insert("authorization", "Bearer nope".parse().unwrap());
        assert!(auth.check_metrics(&wrong).is_err());
        let open = auth.with_open_metrics(true);
        assert!(open.metrics_open());
        assert!(open.check_metrics(&none).is_ok());
        assert!(open.check(&none).is_err(), "only health and metrics open");
        assert!(Auth::disabled().check_metrics(&none).is_ok());
    }

    #[test]
    fn a_world_readable_token_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Auth::from_file(&path),
            Err(AuthError::Permissions { .. })
        ));
    }
}
