//! Offline procedural task families: an endless, verifiable task source that
//! needs no LLM.
//!
//! Each [`Family`] turns `(seed, complexity, scenario)` into a complete native
//! [`Task`]: a user-style instruction, the privileged truth, `environment/setup.sh`
//! (run as root; builds realistic data under `/home/user`), pytest files for the
//! initial and final state, and an oracle `solution/solve.sh`. Generation is pure
//! string building, deterministic (ChaCha8 seeded from a stable FNV hash of
//! `(family, seed, complexity)`; no maps are iterated, no clocks read) and fast.
//!
//! Complexity follows the paper's six levels (1 = a single command ... 6 = 5-10
//! commands): families scale their own data and requirements with it, and from
//! level 4 on every task with a single output file gains 1-3 follow-up steps
//! (hand-off copy, `sha256sum` sidecar, restrictive mode).
//!
//! The scenario (who asks and why) only changes the wording of the instruction,
//! never the data, so the oracle and the near miss depend on `(family, seed,
//! complexity)` alone.
//!
//! # Train / dev split
//!
//! [`split_of`] puts a task in [`Split::Dev`] when
//! * its family is one of the held-out families [`DEV_FAMILIES`] (never trained on), or
//! * its seed is in the held-out residue class `seed % 10 == 9` (held-out data of
//!   the training families).
//!
//! Everything else is [`Split::Train`]. [`generate_batch`] with `Some(split)` only
//! emits tasks of that split; with `None` it emits both.

mod data;
mod families;
pub mod pytest;
mod spec;
mod util;

use rand_chacha::ChaCha8Rng;

use crate::task::{
    AgentSection, EnvironmentSection, FileTree, Provenance, Task, TaskMeta, TaskSection,
    VerifierSection,
};
use pytest::Check;
use spec::{Def, Spec};
use util::{base, parent, rng_for, sq, Pick};

/// Who is asking and why: frames the instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// Stable identifier stored in `[task] scenario`.
    pub name: &'static str,
    /// Who is asking ("a data analyst on the growth team").
    pub who: &'static str,
    /// Why they need it, as a sentence.
    pub why: &'static str,
}

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "devops-oncall", who: "the DevOps engineer on call this week", why: "An alert fired overnight and I need the machine in a clean, known state before the morning stand-up." },
    Scenario { name: "data-analyst", who: "a data analyst on the growth team", why: "I have a report due this afternoon and the raw files need preparing first." },
    Scenario { name: "ml-researcher", who: "an ML researcher", why: "I'm preparing an experiment and want every step to be reproducible." },
    Scenario { name: "sysadmin-audit", who: "the sysadmin for a small office", why: "We have a security and compliance audit next week." },
    Scenario { name: "student-homework", who: "a student learning the Linux command line", why: "This is part of a lab exercise and I want to see it done properly." },
    Scenario { name: "backend-dev", who: "a backend developer", why: "I'm cleaning up before I open a pull request." },
    Scenario { name: "release-manager", who: "the release manager", why: "We're cutting a release tomorrow and I'm going through my checklist." },
    Scenario { name: "sre-postmortem", who: "an SRE writing a post-mortem", why: "I need hard numbers from the machine for the incident write-up." },
    Scenario { name: "freelancer-cleanup", who: "a freelancer juggling several clients", why: "My home directory has become a mess and I'm tidying it up." },
    Scenario { name: "qa-engineer", who: "a QA engineer", why: "Our nightly checks depend on these files being exactly right." },
    Scenario { name: "new-hire-onboarding", who: "a new hire in my first week", why: "My mentor left me this as an onboarding exercise on the shared box." },
    Scenario { name: "security-analyst", who: "a security analyst", why: "I'm triaging a suspicious-looking host and need evidence collected carefully." },
    Scenario { name: "finance-ops", who: "someone in finance operations", why: "Month-end close is today and the numbers must reconcile." },
    Scenario { name: "research-lab", who: "a lab manager at a university research group", why: "The group's shared workstation needs to be in order for the new students." },
];

/// All scenarios (who asks and why).
pub fn scenarios() -> &'static [Scenario] {
    SCENARIOS
}

/// One offline task family.
pub trait Family: Send + Sync {
    /// Stable family name (part of task ids).
    fn name(&self) -> &'static str;
    /// Category, e.g. `log-analysis`.
    fn category(&self) -> &'static str;
    /// Tools beyond the sandbox base the tasks need (callers skip the family, saying
    /// so, when one is absent).
    fn required_tools(&self) -> &'static [&'static str] {
        &[]
    }
    /// Build the task for `(seed, complexity, scenario)`; complexity is clamped to 1..=6.
    fn generate(&self, seed: u64, complexity: u8, scenario: &Scenario) -> Task;
    /// A `solve.sh` variant with one step dropped or one value off: it must fail the
    /// final tests of `task`.
    fn near_miss(&self, task: &Task) -> String;
}

/// Families never used for training (see the module docs).
pub const DEV_FAMILIES: &[&str] = &[
    "log-time-window",
    "json-nested-summary",
    "feature-normalize",
    "symlink-repair",
];

/// Which split a (family, seed) pair belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Training tasks.
    Train,
    /// Held-out development tasks.
    Dev,
}

/// The documented split: held-out families, plus the held-out seeds `seed % 10 == 9`.
pub fn split_of(family: &str, seed: u64) -> Split {
    if DEV_FAMILIES.contains(&family) || seed % 10 == 9 {
        Split::Dev
    } else {
        Split::Train
    }
}

/// The split of a task made by the offline generator (`None` for other tasks).
pub fn task_split(task: &crate::task::Task) -> Option<Split> {
    let family = task.meta.provenance.generator.strip_prefix("procgen/")?;
    Some(split_of(family, task.meta.provenance.seed?))
}

/// All families, in a stable order.
pub fn families() -> Vec<&'static dyn Family> {
    families::ALL
        .iter()
        .flat_map(|group| group.iter())
        .map(|d| d as &'static dyn Family)
        .collect()
}

/// Whether `tool` is an executable file on this machine's `PATH`.
pub fn tool_available(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(tool))
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Families whose required tools are all available here, and the skipped ones
/// with the first missing tool (for a "skipped: needs jq" message).
pub fn usable_families() -> (Vec<&'static dyn Family>, Vec<(&'static str, &'static str)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for f in families() {
        match f.required_tools().iter().find(|t| !tool_available(t)) {
            Some(t) => skipped.push((f.name(), *t)),
            None => ok.push(f),
        }
    }
    (ok, skipped)
}

/// The family called `name`.
pub fn family(name: &str) -> Option<&'static dyn Family> {
    families().into_iter().find(|f| f.name() == name)
}

/// Task id of a generated task.
pub fn task_id(family: &str, seed: u64, complexity: u8) -> String {
    format!("{family}-{seed}-c{complexity}")
}

/// `count` tasks balanced over all families, complexities and scenarios. Ids are
/// unique within the batch and stable: the same arguments give the same tasks.
pub fn generate_batch(count: usize, seed: u64, split: Option<Split>) -> Vec<Task> {
    generate_batch_from(&families(), count, seed, split)
}

/// Like [`generate_batch`], over the given families only (e.g. those whose
/// [`Family::required_tools`] are available, see [`usable_families`]).
pub fn generate_batch_from(
    families: &[&'static dyn Family],
    count: usize,
    seed: u64,
    split: Option<Split>,
) -> Vec<Task> {
    let fams: Vec<&'static dyn Family> = families
        .iter()
        .copied()
        .filter(|f| match split {
            Some(Split::Train) => !DEV_FAMILIES.contains(&f.name()),
            _ => true,
        })
        .collect();
    if fams.is_empty() {
        return Vec::new();
    }
    let n = fams.len().max(1);
    let scen = scenarios();
    let mut next_seed: Vec<u64> = vec![seed; n];
    (0..count)
        .map(|i| {
            let fi = i % n;
            let round = i / n;
            let fam = fams[fi];
            // Next seed for this family that belongs to the requested split.
            let mut s = next_seed[fi];
            let mut guard = 0;
            while let Some(want) = split {
                if split_of(fam.name(), s) == want || guard > 20 {
                    break;
                }
                s = s.wrapping_add(1);
                guard += 1;
            }
            next_seed[fi] = s.wrapping_add(1);
            let complexity = ((round + fi) % 6) as u8 + 1;
            let scenario = &scen[(i + round * 5) % scen.len()];
            fam.generate(s, complexity, scenario)
        })
        .collect()
}

impl Def {
    fn spec(&self, seed: u64, complexity: u8) -> Spec {
        let mut rng = rng_for(self.name, seed, complexity, "data");
        let mut spec = (self.build)(&mut rng, complexity);
        if spec.initial.is_empty() {
            spec.initial.push(Check::Dir("/home/user".into()));
        }
        add_followups(&mut spec, &mut rng, complexity);
        spec
    }
}

impl Family for Def {
    fn name(&self) -> &'static str {
        self.name
    }
    fn category(&self) -> &'static str {
        self.category
    }
    fn required_tools(&self) -> &'static [&'static str] {
        self.tools
    }
    fn generate(&self, seed: u64, complexity: u8, scenario: &Scenario) -> Task {
        let c = complexity.clamp(1, 6);
        let spec = self.spec(seed, c);
        let id = task_id(self.name, seed, c);
        let mut phr = rng_for(self.name, seed, c, scenario.name);
        let instruction = instruction(&spec, scenario, &mut phr);
        let mut truth = format!(
            "# Truth: {}\n\nfamily `{}` (category `{}`), seed {seed}, complexity {c}, scenario `{}`.\n\n",
            spec.title, self.name, self.category, scenario.name
        );
        for t in &spec.truth {
            truth.push_str(&format!("- {t}\n"));
        }
        truth.push_str("\n## Expected final state\n\n");
        for ch in &spec.checks {
            truth.push_str(&format!("- {}\n", ch.describe()));
        }
        truth.push_str(&format!(
            "\n## Oracle\n\n```bash\n{}```\n",
            render_solve(&spec.solve)
        ));
        let mut environment = FileTree::default();
        environment.insert("setup.sh", spec.setup.render().into_bytes(), true);
        let mut tests = FileTree::default();
        tests.insert_text(
            crate::task::INITIAL_TESTS,
            pytest::render(
                &format!("Initial-state checks for {id}: the data the task starts from."),
                &spec.initial,
            ),
        );
        tests.insert_text(
            crate::task::FINAL_TESTS,
            pytest::render(
                &format!("Final-state checks for {id}: {}.", spec.title),
                &spec.checks,
            ),
        );
        let mut solution = FileTree::default();
        solution.insert("solve.sh", render_solve(&spec.solve).into_bytes(), true);
        let difficulty = match c {
            1 | 2 => "easy",
            3 | 4 => "medium",
            _ => "hard",
        };
        Task {
            meta: TaskMeta {
                task: TaskSection {
                    id,
                    name: spec.title.clone(),
                    category: self.category.into(),
                    complexity: Some(c),
                    scenario: scenario.name.into(),
                    difficulty: difficulty.into(),
                    tags: vec![
                        "procgen".into(),
                        self.category.into(),
                        format!("family:{}", self.name),
                    ],
                    source_format: "native".into(),
                    extra: Default::default(),
                },
                agent: AgentSection::default(),
                verifier: VerifierSection::default(),
                environment: EnvironmentSection::default(),
                provenance: Provenance {
                    generator: format!("procgen/{}", self.name),
                    model: String::new(),
                    seed: Some(seed),
                    created: String::new(),
                    attempts: Default::default(),
                    solvability: None,
                    baseline: None,
                    extra: Default::default(),
                },
                extra: Default::default(),
            },
            instruction,
            truth,
            environment,
            tests,
            solution,
        }
    }
    fn near_miss(&self, task: &Task) -> String {
        let seed = task.meta.provenance.seed.unwrap_or(0);
        let c = task.meta.task.complexity.unwrap_or(1).clamp(1, 6);
        let spec = self.spec(seed, c);
        render_solve(&near_miss_steps(&spec))
    }
}

/// Steps of the near miss: the family's own variant, or the oracle without its last
/// main step (follow-up steps are kept).
fn near_miss_steps(spec: &Spec) -> Vec<String> {
    if let Some(nm) = &spec.near_miss {
        let mut v = nm.clone();
        v.extend(
            spec.solve
                .iter()
                .skip(spec.solve.len() - spec.followups())
                .cloned(),
        );
        return v;
    }
    let mut v = spec.solve.clone();
    let main = v.len() - spec.followups();
    if main > 0 {
        v.remove(main - 1);
    }
    v
}

impl Spec {
    /// Whether setup already writes `path` (families avoid duplicate paths).
    pub(crate) fn setup_has(&self, path: &str) -> bool {
        self.checks
            .iter()
            .chain(self.initial.iter())
            .any(|c| match c {
                Check::Content(p, _) | Check::File(p) => p == path,
                _ => false,
            })
    }
}

impl Spec {
    fn followups(&self) -> usize {
        self.solve
            .iter()
            .filter(|s| s.starts_with(FOLLOWUP_MARK))
            .count()
    }
}

const FOLLOWUP_MARK: &str = "# follow-up: ";

/// From complexity 4 on, add 1-3 generic follow-up steps on the single output file.
fn add_followups(spec: &mut Spec, rng: &mut ChaCha8Rng, complexity: u8) {
    let Some(out) = spec.output.clone() else {
        return;
    };
    let n = complexity.saturating_sub(3) as usize;
    if n == 0 {
        return;
    }
    let mut which = [0usize, 1, 2];
    rng.shuffle_vec(&mut which);
    let mut chosen: Vec<usize> = which[..n.min(3)].to_vec();
    chosen.sort_unstable();
    let name = base(&out).to_string();
    for w in chosen {
        match w {
            0 => {
                let dest = format!("/home/user/handoff/{name}");
                spec.reqs.push(format!(
                    "When it is done, put an identical copy of `{out}` at `{dest}` (create the directory)."
                ));
                spec.checks.push(Check::SameAs(dest.clone(), out.clone()));
                spec.solve.push(format!(
                    "{FOLLOWUP_MARK}hand-off copy\nmkdir -p /home/user/handoff && cp {} {}",
                    sq(&out),
                    sq(&dest)
                ));
            }
            1 => {
                let side = format!("{out}.sha256");
                spec.reqs.push(format!(
                    "Record the SHA-256 of the finished `{out}` in `{side}`, in `sha256sum` format with just the file name (`<hash>  {name}`)."
                ));
                spec.checks
                    .push(Check::ChecksumSidecar(side.clone(), out.clone()));
                spec.solve.push(format!(
                    "{FOLLOWUP_MARK}checksum sidecar\n(cd {} && sha256sum {} > {})",
                    sq(parent(&out)),
                    sq(&name),
                    sq(&format!("{name}.sha256"))
                ));
            }
            _ => {
                spec.reqs.push(format!(
                    "Finally make `{out}` readable and writable by you, readable by your group, and inaccessible to others (mode 640)."
                ));
                spec.checks.push(Check::Mode(out.clone(), 0o640));
                spec.solve.push(format!(
                    "{FOLLOWUP_MARK}restrict mode\nchmod 640 {}",
                    sq(&out)
                ));
            }
        }
    }
}

/// The oracle script from its steps.
fn render_solve(steps: &[String]) -> String {
    let mut s = String::from(
        "#!/bin/bash\n# Oracle solution generated by endless procgen.\nset -eu\ncd /home/user\n",
    );
    for st in steps {
        s.push_str(st);
        s.push('\n');
    }
    s
}

/// Frame the request: scenario opener, one of the goal phrasings, the requirements.
fn instruction(spec: &Spec, sc: &Scenario, rng: &mut ChaCha8Rng) -> String {
    let opener = match rng.int(0, 3) {
        0 => format!("I'm {}. {}", sc.who, sc.why),
        1 => format!("{} (For context: I'm {}.)", sc.why, sc.who),
        2 => format!("Hi! I'm {} and could use a hand. {}", sc.who, sc.why),
        _ => format!("Quick one from {}: {}", sc.who, lower_first(sc.why)),
    };
    let goal = if spec.goals.is_empty() {
        spec.title.clone()
    } else {
        rng.pick(&spec.goals)
    };
    let lead = rng.pick(&[
        "Details:",
        "Requirements:",
        "Please make sure that:",
        "Specifics:",
    ]);
    let closer = rng.pick(&[
        "",
        "Thanks!",
        "Please leave everything else in my home directory as it is.",
        "I'll check the files myself afterwards, so exact names and formats matter.",
        "Work from the shell; you are already in /home/user.",
    ]);
    let mut s = format!("{opener}\n\n{goal}\n");
    if !spec.reqs.is_empty() {
        s.push_str(&format!("\n{lead}\n"));
        for r in &spec.reqs {
            s.push_str(&format!("- {r}\n"));
        }
    }
    if !closer.is_empty() {
        s.push_str(&format!("\n{closer}\n"));
    }
    s
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
