//! The one way a command prints a line of text on stdout (`say!`): a reader
//! that has gone ends the command as it ends Unix tools, never in a panic.

/// Print one line on stdout for `say!`. When the reader has gone
/// (`endless tasks list | head`) the command ends as Unix tools do on
/// SIGPIPE (exit status 141), instead of `println!`'s panic; what it had
/// saved stays saved, since every write is atomic.
pub(crate) fn line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        // Any other failure to print (a full disk behind a redirect):
        // said on stderr, with the I/O error status of sysexits.h.
        eprintln!("endless: cannot print to stdout: {e}");
        std::process::exit(74);
    }
}
