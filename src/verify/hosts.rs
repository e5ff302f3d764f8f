//! Which host a tool could not reach, read from its output (issue 52): the
//! messages of curl, wget, git, ssh, apt, pip (urllib3), uv, npm and Go
//! name it in the line that failed, or in a URL a few lines away from a
//! line saying why (a name that did not resolve, a connection refused).
//! Output naming no host gives none: a host is never guessed, and the local
//! machine (`localhost`, `127.0.0.1`) is never one that "needs the network".

/// Lines either side of a bare "name resolution failed" line searched for
/// the URL it was about (uv's `Caused by:` chains are this long).
const NEAR: usize = 4;

/// Phrases after which a message names the host itself, up to a quote,
/// space, colon or bracket.
const NAMED: &[&str] = &[
    "could not resolve host: ",         // curl, git
    "could not resolve hostname ",      // ssh
    "temporary failure resolving '",    // apt
    "could not resolve '",              // apt
    "failed to resolve '",              // urllib3 2
    "host='",                           // urllib3's HTTP(S)ConnectionPool
    "unable to resolve host address '", // wget
    "failed to connect to ",            // curl
    "could not connect to ",            // apt
    "getaddrinfo eai_again ",           // npm, node
    "getaddrinfo enotfound ",           // npm, node
    "dial tcp: lookup ",                // Go
];

/// Why a connection failed, in lines that name the host only in a URL.
const CAUSES: &[&str] = &[
    "temporary failure in name resolution",
    "name or service not known",
    "failed to lookup address",
    "dns error",
    "network is unreachable",
    "no route to host",
    "connection refused",
    "connection timed out",
    "failed to establish a new connection",
    "could not resolve",
    "unable to resolve",
];

/// How a name that did not resolve shows: never about the local machine,
/// so the network was needed even where no host is named.
const UNRESOLVED: &[&str] = &[
    "temporary failure in name resolution",
    "name or service not known",
    "temporary failure resolving",
    "could not resolve host",
    "failed to lookup address",
    "getaddrinfo eai_again",
    "getaddrinfo enotfound",
    "unable to resolve host",
];

/// The first line of `text` (trimmed) saying a host name did not resolve,
/// whether or not it names the host.
pub fn unresolved_name(text: &str) -> Option<String> {
    text.lines()
        .find(|l| {
            let low = l.to_ascii_lowercase();
            UNRESOLVED.iter().any(|m| low.contains(m))
        })
        .map(|l| l.trim().to_string())
}

/// The first host `text` says could not be reached, with the line that
/// says so (trimmed); `None` when no line names one.
pub fn unreachable_host(text: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let low = line.to_ascii_lowercase();
        if let Some(host) = named_host(line, &low) {
            return Some((host, line.trim().to_string()));
        }
        if !CAUSES.iter().any(|c| low.contains(c)) {
            continue;
        }
        // The URL it was about: on the line, else the nearest one around.
        let near = (0..=NEAR).flat_map(|d| [i.checked_sub(d), Some(i + d)]);
        let url = near
            .flatten()
            .filter_map(|j| lines.get(j))
            .find_map(|l| url_host(l));
        if let Some(host) = url {
            return Some((host, line.trim().to_string()));
        }
    }
    None
}

/// The host a [`NAMED`] phrase of `line` (`low`: lowercased) names.
fn named_host(line: &str, low: &str) -> Option<String> {
    for phrase in NAMED {
        let Some(at) = low.find(phrase) else {
            continue;
        };
        let rest = &line[at + phrase.len()..];
        let end = rest
            .find(['\'', '"', ' ', ':', ')', ']', ',', '`', '/'])
            .unwrap_or(rest.len());
        if let Some(host) = remote(&rest[..end]) {
            return Some(host);
        }
    }
    None
}

/// The host of the first `http(s)://`, `ftp://` or `git://` URL in `line`.
fn url_host(line: &str) -> Option<String> {
    let at = line.find("://")?;
    let scheme_start = line[..at]
        .rfind(|c: char| !c.is_ascii_alphanumeric() && c != '+')
        .map_or(0, |p| p + 1);
    let scheme = line[scheme_start..at].to_ascii_lowercase();
    if !matches!(
        scheme.as_str(),
        "http" | "https" | "ftp" | "git" | "git+https" | "git+http"
    ) {
        return None;
    }
    let rest = &line[at + 3..];
    let authority = rest
        .split(['/', '\'', '"', ' ', '`', ')', '>', '?', '#'])
        .next()?;
    let host = authority.rsplit('@').next()?;
    let host = host.split(':').next()?;
    remote(host)
}

/// `word` as a host name when it looks like a remote one (letters, digits,
/// dots and dashes, with a dot), not the local machine.
fn remote(word: &str) -> Option<String> {
    let host = word.trim_end_matches('.').to_ascii_lowercase();
    let plausible = host.contains('.')
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !host.starts_with(['.', '-']);
    let local = host == "localhost"
        || host.ends_with(".localhost")
        || host.starts_with("127.")
        || host == "0.0.0.0";
    (plausible && !local).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Option<String> {
        unreachable_host(text).map(|(h, _)| h)
    }

    #[test]
    fn each_tool_names_its_host() {
        let cases = [
            // curl
            ("curl: (6) Could not resolve host: github.com", "github.com"),
            (
                "curl: (7) Failed to connect to archive.org port 443 after 2 ms: Couldn't connect to server",
                "archive.org",
            ),
            // git
            (
                "fatal: unable to access 'https://github.com/foo/bar.git/': Could not resolve host: github.com",
                "github.com",
            ),
            // ssh
            (
                "ssh: Could not resolve hostname gitlab.com: Temporary failure in name resolution",
                "gitlab.com",
            ),
            // apt
            (
                "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'",
                "deb.debian.org",
            ),
            (
                "E: Failed to fetch http://archive.ubuntu.com/ubuntu/pool/main/r/r-base/r-base-core_4.3.3-2build2_amd64.deb  Could not resolve 'archive.ubuntu.com'",
                "archive.ubuntu.com",
            ),
            (
                "Could not connect to deb.debian.org:80 (151.101.2.132), connection timed out",
                "deb.debian.org",
            ),
            // pip, requests, huggingface_hub (urllib3 1 and 2)
            (
                "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='files.pythonhosted.org', port=443): Max retries exceeded with url: /packages/x.whl (Caused by NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f3c>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution'))",
                "files.pythonhosted.org",
            ),
            (
                "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /api/models/bert-base-uncased (Caused by NameResolutionError(\\\"<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\\\"))\"), '(Request ID: 1)')",
                "huggingface.co",
            ),
            // wget
            (
                "wget: unable to resolve host address 'archive.org'",
                "archive.org",
            ),
            // npm, Go
            (
                "npm ERR! request to https://registry.npmjs.org/left-pad failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org",
                "registry.npmjs.org",
            ),
            (
                "go: github.com/x/y@v1.0.0: Get \"https://proxy.golang.org/github.com/x/y/@v/v1.0.0.mod\": dial tcp: lookup proxy.golang.org on 10.0.2.3:53: no such host",
                "proxy.golang.org",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(host(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn a_bare_resolution_failure_takes_the_url_nearby() {
        // uv: the URL two lines above the DNS error.
        let uv = "error: Failed to fetch: `https://pypi.org/simple/numpy/`\n  \
                  Caused by: Request failed after 3 retries\n  \
                  Caused by: error sending request for url (https://pypi.org/simple/numpy/)\n  \
                  Caused by: client error (Connect)\n  \
                  Caused by: dns error: failed to lookup address information: Temporary failure in name resolution";
        let (h, line) = unreachable_host(uv).unwrap();
        assert_eq!(h, "pypi.org");
        assert!(line.starts_with("Caused by: dns error"), "{line}");
        // Python's urllib: the URL was printed before it failed.
        let py = "Downloading https://archive.org/download/x/data.tar.gz\n\
                  urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>";
        assert_eq!(host(py).as_deref(), Some("archive.org"));
    }

    #[test]
    fn a_name_that_did_not_resolve_needs_the_network_named_or_not() {
        let pip = "Collecting roman==4.2\n\
                   WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f635d4a7090>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/roman/\n\
                   ERROR: No matching distribution found for roman==4.2";
        assert!(unresolved_name(pip)
            .unwrap()
            .starts_with("WARNING: Retrying"));
        assert_eq!(unreachable_host(pip), None);
        // A refused connection may be a local server: not a name.
        assert_eq!(
            unresolved_name(
                "curl: (7) Failed to connect to 127.0.0.1 port 5000 after 0 ms: Connection refused"
            ),
            None
        );
    }

    #[test]
    fn no_host_is_guessed() {
        for text in [
            // The failure names no host and no URL is near.
            "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(': Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/numpy/",
            // A URL with no failure around it.
            "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]",
            // The local machine is not the network.
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8080): Max retries exceeded (Caused by NewConnectionError(': Failed to establish a new connection: [Errno 111] Connection refused'))",
            "curl: (7) Failed to connect to 127.0.0.1 port 5000 after 0 ms: Connection refused",
            "E: Failed to fetch http://deb.debian.org/debian/pool/main/x/x_1.0_amd64.deb  404  Not Found [IP: 151.101.2.132 80]",
            "assert 3 == 4",
        ] {
            assert_eq!(host(text), None, "{text}");
        }
    }
}
