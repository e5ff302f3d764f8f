//! Files out of a PyPI wheel, for the uv stand-in: find the release on
//! PyPI's JSON API, download the wheel for this machine (sha256-checked
//! against PyPI's digest) and read members out of it (a wheel is a zip:
//! stored or deflated members, found through the central directory).

use std::io::Read;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ImageError;

/// PyPI's JSON API (overridable with `ENDLESS_PYPI_URL` for mirrors).
fn pypi_base() -> String {
    std::env::var("ENDLESS_PYPI_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "https://pypi.org".into())
        .trim_end_matches('/')
        .to_string()
}

#[derive(Debug, Deserialize)]
struct Project {
    info: Info,
    #[serde(default)]
    releases: std::collections::BTreeMap<String, Vec<File>>,
    #[serde(default)]
    urls: Vec<File>,
}

#[derive(Debug, Deserialize)]
struct Info {
    version: String,
}

#[derive(Debug, Clone, Deserialize)]
struct File {
    filename: String,
    url: String,
    digests: Digests,
    #[serde(default)]
    yanked: bool,
}

#[derive(Debug, Clone, Deserialize)]
struct Digests {
    sha256: String,
}

/// A downloaded wheel.
#[derive(Debug)]
pub struct Wheel {
    /// The exact version.
    pub version: String,
    /// Its file name on PyPI.
    pub filename: String,
    /// Its bytes (digest-checked).
    pub bytes: Vec<u8>,
}

/// The numeric parts of a final release (`0.8.14` -> `[0, 8, 14]`); `None`
/// for pre-releases and other shapes.
fn numeric(version: &str) -> Option<Vec<u64>> {
    version.split('.').map(|p| p.parse().ok()).collect()
}

/// The newest final release of `releases` matching `wanted` (`latest`, an
/// `X.Y` prefix, or exact).
fn pick_version<'a>(
    wanted: &str,
    latest: &'a str,
    releases: impl Iterator<Item = &'a String>,
) -> Option<String> {
    if wanted == "latest" {
        return Some(latest.to_string());
    }
    let prefix = numeric(wanted)?;
    releases
        .filter_map(|v| numeric(v).map(|n| (n, v)))
        .filter(|(n, _)| n.len() >= prefix.len() && n[..prefix.len()] == prefix[..])
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, v)| v.clone())
}

/// The wheel of `files` for this machine: musllinux first (static), then
/// manylinux.
fn pick_file(files: &[File], arch: &str) -> Option<File> {
    let fits = |f: &&File, tag: &str| {
        !f.yanked
            && f.filename.ends_with(".whl")
            && f.filename.contains(tag)
            && f.filename.contains(&format!("_{arch}"))
    };
    files
        .iter()
        .find(|f| fits(f, "musllinux"))
        .or_else(|| files.iter().find(|f| fits(f, "manylinux")))
        .cloned()
}

async fn get(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, ImageError> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| ImageError::Pypi(format!("{url}: {}", chain(&e))))?;
    let status = response.status();
    if !status.is_success() {
        return Err(ImageError::Pypi(format!("{url}: HTTP {status}")));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| ImageError::Pypi(format!("{url}: {e}")))?;
    Ok(bytes.to_vec())
}

async fn fetch_async(project: &str, wanted: &str) -> Result<Wheel, ImageError> {
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(300));
    // The host's CA bundle too (a TLS-inspecting proxy's CA lives there).
    for cert in host_certificates() {
        builder = builder.add_root_certificate(cert);
    }
    let client = builder
        .build()
        .map_err(|e| ImageError::Pypi(e.to_string()))?;
    let base = pypi_base();
    let url = format!("{base}/pypi/{project}/json");
    let index: Project = serde_json::from_slice(&get(&client, &url).await?)
        .map_err(|e| ImageError::Pypi(format!("{url}: {e}")))?;
    let version = pick_version(wanted, &index.info.version, index.releases.keys())
        .ok_or_else(|| ImageError::Pypi(format!("{project} has no release {wanted}")))?;
    let files = match index.releases.get(&version) {
        Some(files) if !files.is_empty() => files.clone(),
        _ => {
            let url = format!("{base}/pypi/{project}/{version}/json");
            let one: Project = serde_json::from_slice(&get(&client, &url).await?)
                .map_err(|e| ImageError::Pypi(format!("{url}: {e}")))?;
            one.urls
        }
    };
    let arch = std::env::consts::ARCH;
    let file = pick_file(&files, arch).ok_or_else(|| {
        ImageError::Pypi(format!(
            "{project} {version} has no Linux wheel for {arch} (files: {})",
            files
                .iter()
                .map(|f| f.filename.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    // Mirrors may answer with URLs relative to the index page.
    let file_url = reqwest::Url::parse(&url)
        .and_then(|u| u.join(&file.url))
        .map_err(|e| ImageError::Pypi(format!("{}: {e}", file.url)))?;
    let bytes = get(&client, file_url.as_str()).await?;
    let actual = hex(&Sha256::digest(&bytes));
    if !actual.eq_ignore_ascii_case(&file.digests.sha256) {
        return Err(ImageError::Pypi(format!(
            "{} arrived with sha256 {actual}, PyPI says {}: refused",
            file.filename, file.digests.sha256
        )));
    }
    Ok(Wheel {
        version,
        filename: file.filename,
        bytes,
    })
}

/// The certificates of the host's CA bundle (`SSL_CERT_FILE`, else
/// Debian's and Red Hat's places); none when there is none.
fn host_certificates() -> Vec<reqwest::Certificate> {
    let candidates = std::env::var("SSL_CERT_FILE").ok().into_iter().chain(
        [
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/pki/tls/certs/ca-bundle.crt",
        ]
        .map(String::from),
    );
    for path in candidates {
        // trusted: the host's CA certificates
        if let Ok(pem) = std::fs::read(&path) {
            if let Ok(certs) = reqwest::Certificate::from_pem_bundle(&pem) {
                return certs;
            }
        }
    }
    Vec::new()
}

/// An error with its causes, `: `-joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Download the wheel of `project` at `wanted` (`latest`, `X.Y` or exact)
/// for this machine from PyPI.
pub fn fetch(project: &str, wanted: &str) -> Result<Wheel, ImageError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ImageError::io("start a runtime", "tokio")(e))?;
                rt.block_on(fetch_async(project, wanted))
            })
            .join()
            .unwrap_or_else(|_| Err(ImageError::Pypi("the download thread panicked".into())))
    })
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
}

/// The members of the zip `bytes` whose names satisfy `want`, as
/// `(name, contents)`, in directory order; at most `limit` bytes each.
pub fn zip_members(
    bytes: &[u8],
    want: impl Fn(&str) -> bool,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    const EOCD: &[u8] = b"PK\x05\x06";
    let start = bytes.len().saturating_sub(22 + 65535);
    let eocd = (start..bytes.len().saturating_sub(21))
        .rev()
        .find(|&i| &bytes[i..i + 4] == EOCD)
        .ok_or("no end of central directory: not a zip")?;
    let count = u16_at(bytes, eocd + 10).ok_or("truncated")?;
    let mut at = u32_at(bytes, eocd + 16).ok_or("truncated")?;
    let mut out = Vec::new();
    for _ in 0..count {
        if bytes.get(at..at + 4) != Some(b"PK\x01\x02") {
            return Err(format!("bad central directory entry at {at}"));
        }
        let method = u16_at(bytes, at + 10).ok_or("truncated")?;
        let compressed = u32_at(bytes, at + 20).ok_or("truncated")?;
        let size = u32_at(bytes, at + 24).ok_or("truncated")?;
        let name_len = u16_at(bytes, at + 28).ok_or("truncated")?;
        let extra_len = u16_at(bytes, at + 30).ok_or("truncated")?;
        let comment_len = u16_at(bytes, at + 32).ok_or("truncated")?;
        let local = u32_at(bytes, at + 42).ok_or("truncated")?;
        let name = String::from_utf8_lossy(
            bytes
                .get(at + 46..at + 46 + name_len)
                .ok_or("truncated name")?,
        )
        .into_owned();
        at += 46 + name_len + extra_len + comment_len;
        if !want(&name) {
            continue;
        }
        if size > limit {
            return Err(format!("{name}: {size} bytes, over the limit of {limit}"));
        }
        if bytes.get(local..local + 4) != Some(b"PK\x03\x04") {
            return Err(format!("{name}: bad local header"));
        }
        let data_at = local
            + 30
            + u16_at(bytes, local + 26).ok_or("truncated")?
            + u16_at(bytes, local + 28).ok_or("truncated")?;
        let data = bytes
            .get(data_at..data_at + compressed)
            .ok_or_else(|| format!("{name}: truncated data"))?;
        let contents = match method {
            0 => data.to_vec(),
            8 => {
                let mut v = Vec::with_capacity(size);
                flate2::read::DeflateDecoder::new(data)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut v)
                    .map_err(|e| format!("{name}: {e}"))?;
                v
            }
            m => return Err(format!("{name}: compression method {m} is not supported")),
        };
        if contents.len() != size {
            return Err(format!(
                "{name}: {} bytes unpacked, the directory says {size}",
                contents.len()
            ));
        }
        out.push((name, contents));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A zip with one stored and one deflated member, written by hand.
    fn zip(members: &[(&str, &[u8], bool)]) -> Vec<u8> {
        let (mut out, mut central) = (Vec::new(), Vec::new());
        for (name, data, deflate) in members {
            let body = if *deflate {
                let mut e =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            } else {
                data.to_vec()
            };
            let method: u16 = if *deflate { 8 } else { 0 };
            let offset = out.len() as u32;
            out.extend_from_slice(b"PK\x03\x04");
            out.extend_from_slice(&[20, 0, 0, 0]);
            out.extend_from_slice(&method.to_le_bytes());
            out.extend_from_slice(&[0; 8]); // time, date, crc
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&body);
            central.extend_from_slice(b"PK\x01\x02");
            central.extend_from_slice(&[20, 0, 20, 0, 0, 0]);
            central.extend_from_slice(&method.to_le_bytes());
            central.extend_from_slice(&[0; 8]);
            central.extend_from_slice(&(body.len() as u32).to_le_bytes());
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(name.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0; 12]); // extra, comment, disk, attrs
            central.extend_from_slice(&offset.to_le_bytes());
            central.extend_from_slice(name.as_bytes());
        }
        let cd_at = out.len() as u32;
        out.extend_from_slice(&central);
        out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
        out.extend_from_slice(&(members.len() as u16).to_le_bytes());
        out.extend_from_slice(&(members.len() as u16).to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd_at.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    #[test]
    fn reads_stored_and_deflated_members() {
        let big = b"uv binary ".repeat(1000);
        let z = zip(&[
            ("uv-0.8.14.data/scripts/uv", &big, true),
            ("uv-0.8.14.data/scripts/uvx", b"uvx", false),
            ("uv/__init__.py", b"", false),
        ]);
        let got = zip_members(&z, |n| n.contains(".data/scripts/"), 1 << 20).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, big);
        assert_eq!(
            got[1],
            ("uv-0.8.14.data/scripts/uvx".into(), b"uvx".to_vec())
        );
        let e = zip_members(&z, |n| n.ends_with("/uv"), 100).unwrap_err();
        assert!(e.contains("over the limit"), "{e}");
        assert!(zip_members(b"not a zip at all, really not", |_| true, 10).is_err());
    }

    #[test]
    fn versions_and_files_are_picked_for_this_machine() {
        let releases: Vec<String> = ["0.8.9", "0.8.14", "0.8.2", "0.9.0", "0.9.1rc1"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            pick_version("0.8", "0.9.0", releases.iter()).unwrap(),
            "0.8.14"
        );
        assert_eq!(
            pick_version("latest", "0.9.0", releases.iter()).unwrap(),
            "0.9.0"
        );
        assert_eq!(
            pick_version("0.8.2", "0.9.0", releases.iter()).unwrap(),
            "0.8.2"
        );
        assert!(pick_version("0.7", "0.9.0", releases.iter()).is_none());
        let f = |n: &str| File {
            filename: n.into(),
            url: String::new(),
            digests: Digests {
                sha256: String::new(),
            },
            yanked: false,
        };
        let files = [
            f("uv-0.8.14.tar.gz"),
            f("uv-0.8.14-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
            f("uv-0.8.14-py3-none-musllinux_1_1_x86_64.whl"),
            f("uv-0.8.14-py3-none-musllinux_1_1_aarch64.whl"),
        ];
        assert!(pick_file(&files, "x86_64")
            .unwrap()
            .filename
            .contains("musllinux_1_1_x86_64"));
        assert!(pick_file(&files[..2], "x86_64")
            .unwrap()
            .filename
            .contains("manylinux"));
        assert!(pick_file(&files, "riscv64").is_none());
    }
}
