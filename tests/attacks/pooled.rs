//! A sandbox handed out from the pool of pre-started sandboxes (`[sandbox]
//! pool`) was started before its episode, while another session of the
//! same image ran: it must show no trace of that session (files, processes,
//! environment) and be confined exactly as a sandbox started on request
//! (the same mounts, capabilities, seccomp filter and id mapping), and its
//! recording and wall clock must be its own episode's.

use endless::sandbox::pool::PoolSettings;

#[allow(unused_imports)]
use super::*;

/// What the confinement looks like from inside: the mount table (mount
/// point, type, options; ids and devices differ between sandboxes), the
/// capability sets, seccomp, no_new_privs and the id maps.
const CONFINEMENT: &str = "awk '{print $5, $6, $(NF-2), $(NF-1)}' /proc/self/mountinfo; \
     grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status; \
     cat /proc/self/uid_map /proc/self/gid_map; hostname; id";

#[test]
fn a_pooled_sandbox_shows_no_other_session_and_is_confined_as_a_fresh_one() {
    both(
        "pooled::a_pooled_sandbox_shows_no_other_session_and_is_confined_as_a_fresh_one",
        |b| {
            let pooled = b.clone().with_pool(PoolSettings {
                size: 1,
                idle: Duration::from_secs(60),
            });
            let t = task("atk-pooled", "root", "true\n");
            let image = pooled.prepare(&t).unwrap();
            // The first start asks the pool for this image; the pool's
            // sandbox starts while this session plants its traces.
            let mut first = pooled.start(&image, &SessionOptions::default()).unwrap();
            let tag = format!("pooled-trace-{}", std::process::id());
            run(
                &mut first,
                &format!(
                    "echo {tag} > /tmp/{tag}; echo {tag} > ~/{tag}; echo {tag} > /dev/shm/{tag}; \
                     export TRACE={tag}; (sleep 86417 &) ; true"
                ),
            );
            let until = std::time::Instant::now() + Duration::from_secs(30);
            while pooled.pool_stats().unwrap().ready == 0 {
                assert!(
                    std::time::Instant::now() < until,
                    "the pool started nothing: {:?}",
                    pooled.pool_stats()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            // A sandbox started on request, to compare with (started first:
            // the pooled one's wall clock runs from its hand-out).
            let mut fresh = session(b, &t);
            let dir = tempfile::tempdir().unwrap();
            let cast = dir.path().join("episode.cast");
            let wall_clock = Duration::from_secs(6);
            let opts = SessionOptions {
                record: Some(cast.clone()),
                wall_clock,
                ..SessionOptions::default()
            };
            let hits = pooled.pool_stats().unwrap().hits;
            let handed_out = std::time::Instant::now();
            let mut second = pooled.start(&image, &opts).unwrap();
            assert_eq!(
                pooled.pool_stats().unwrap().hits,
                hits + 1,
                "the second session did not come from the pool"
            );
            let seen = run(
                &mut second,
                &format!(
                    "cat /tmp/{tag} ~/{tag} /dev/shm/{tag} 2>/dev/null; echo env=$TRACE; \
                     for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done \
                     | grep -c '^sleep 86417'; true"
                ),
            );
            assert!(!seen.contains(&format!("{tag}\n")), "{seen}");
            assert!(seen.contains("env=\n"), "{seen}");
            assert_eq!(seen.lines().last().map(str::trim), Some("0"), "{seen}");
            // Confined as a sandbox started on request.
            let (a, f) = (run(&mut second, CONFINEMENT), run(&mut fresh, CONFINEMENT));
            assert_eq!(a, f, "pooled and fresh sandboxes differ");
            assert!(a.contains("Seccomp:\t2"), "{a}");
            // Its recording is this episode's, and its wall clock started
            // at hand-out: the episode's 6 s end it.
            let end = handed_out + wall_clock + Duration::from_millis(100);
            std::thread::sleep(end.saturating_duration_since(std::time::Instant::now()));
            let late = second.exec("true", T);
            assert!(late.is_err(), "the episode outlived its wall clock");
            drop(second);
            let recorded = std::fs::read_to_string(&cast).unwrap();
            assert!(recorded.contains("env="), "{recorded}");
            for s in [first, fresh] {
                s.close();
            }
        },
    );
}
