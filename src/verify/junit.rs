//! JUnit XML (as written by `pytest --junitxml`) to per-test results.

use quick_xml::errors::IllFormedError;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::report::TestCase;
use crate::sandbox::SandboxError;

#[derive(Default)]
struct Current {
    name: String,
    failed: bool,
    message: String,
    text: String,
    in_outcome: bool,
}

fn attr(e: &BytesStart, key: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

/// A JUnit report read as far as it goes (see [`read_junit`]).
#[derive(Debug, Default)]
pub(super) struct JunitRead {
    /// The cases whose element the report holds whole, in document order.
    pub cases: Vec<TestCase>,
    /// The report stops before its end (it was cut short).
    pub cut: bool,
    /// The case the report stops inside, named, when it was cut there.
    pub unfinished: Option<String>,
    /// How many tests its suites say they ran (`tests` of each `<testsuite>`).
    pub declared: usize,
}

/// Parse JUnit XML into test cases, in document order. A `<failure>` or
/// `<error>` makes a test fail (its message and text become the message);
/// a `<skipped>` test counts as passed with a note. A document that ends
/// inside an element (cut short) is an error: its cases are not all there.
pub fn parse_junit(xml: &str) -> Result<Vec<TestCase>, SandboxError> {
    let read = read_junit(xml)?;
    if read.cut {
        return Err(SandboxError::Verify(
            "JUnit XML ends inside an element: the report is incomplete (cut short?), so it is not scored".into(),
        ));
    }
    Ok(read.cases)
}

/// Read JUnit XML as [`parse_junit`] does, but a document that stops
/// before its end (inside an element, a tag or a reference: cut short) is
/// no error: what it holds whole is returned, and that it was cut, with
/// the case it stops inside. Malformed XML before its end is an error.
pub(super) fn read_junit(xml: &str) -> Result<JunitRead, SandboxError> {
    let mut reader = Reader::from_str(xml);
    let mut read = JunitRead::default();
    let mut cur: Option<Current> = None;
    let mut open = OpenElements::default();
    loop {
        let event = match reader.read_event() {
            Ok(event) => event,
            // The input ended inside markup or a reference: it was cut.
            Err(
                quick_xml::Error::Syntax(_)
                | quick_xml::Error::IllFormed(IllFormedError::UnclosedReference),
            ) => {
                read.cut = true;
                break;
            }
            Err(e) => {
                return Err(SandboxError::Verify(format!(
                    "JUnit XML is malformed at byte {}: {e}",
                    reader.error_position()
                )))
            }
        };
        open.track(&event);
        let event_kind = if matches!(event, Event::Empty(_)) {
            Kind::Empty
        } else {
            Kind::Other
        };
        match event {
            Event::Start(e) if e.name().as_ref() == b"testsuite" => {
                read.declared += attr(&e, b"tests")
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0);
            }
            Event::Start(e) if e.name().as_ref() == b"testcase" => {
                if let Some(done) = cur.take() {
                    read.cases.push(finish(done));
                }
                cur = Some(new_case(&e));
            }
            Event::Empty(e) if e.name().as_ref() == b"testcase" => {
                if let Some(done) = cur.take() {
                    read.cases.push(finish(done));
                }
                read.cases.push(finish(new_case(&e)));
            }
            Event::Start(e) | Event::Empty(e)
                if matches!(e.name().as_ref(), b"failure" | b"error" | b"skipped") =>
            {
                let empty = matches!(event_kind, Kind::Empty);
                if let Some(c) = cur.as_mut() {
                    let kind = e.name().as_ref().to_vec();
                    let msg = attr(&e, b"message").unwrap_or_default();
                    if kind == b"skipped" {
                        if c.message.is_empty() {
                            c.message = format!("skipped: {msg}");
                        }
                    } else {
                        c.failed = true;
                        c.message = msg;
                    }
                    c.in_outcome = !empty;
                }
            }
            Event::End(e) if matches!(e.name().as_ref(), b"failure" | b"error" | b"skipped") => {
                if let Some(c) = cur.as_mut() {
                    c.in_outcome = false;
                }
            }
            Event::Text(t) => {
                if let Some(c) = cur.as_mut().filter(|c| c.in_outcome) {
                    c.text.push_str(&t.xml_content().unwrap_or_default());
                }
            }
            Event::CData(t) => {
                if let Some(c) = cur.as_mut().filter(|c| c.in_outcome) {
                    c.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::GeneralRef(r) => {
                if let Some(c) = cur.as_mut().filter(|c| c.in_outcome) {
                    if let Ok(Some(ch)) = r.resolve_char_ref() {
                        c.text.push(ch);
                    } else if let Ok(name) = r.decode() {
                        c.text.push_str(
                            quick_xml::escape::resolve_predefined_entity(&name).unwrap_or(""),
                        );
                    }
                }
            }
            Event::End(e) if e.name().as_ref() == b"testcase" => {
                if let Some(done) = cur.take() {
                    read.cases.push(finish(done));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    read.cut |= !open.0.is_empty();
    if let Some(c) = cur.take() {
        // An element cut inside is not whole: its result is lost.
        if read.cut && open.0.iter().any(|n| n == "testcase") {
            read.unfinished = Some(c.name);
        } else {
            read.cases.push(finish(c));
        }
    }
    Ok(read)
}

fn finish(c: Current) -> TestCase {
    let text = c.text.trim();
    let message = if text.is_empty() || !c.failed {
        c.message
    } else if c.message.is_empty() {
        text.to_string()
    } else {
        format!("{}\n{}", c.message, text)
    };
    TestCase {
        name: c.name,
        passed: !c.failed,
        message,
    }
}

enum Kind {
    Empty,
    Other,
}

/// The elements open at the reader's position (quick-xml checks that end
/// tags match, not that the document ends with none open).
#[derive(Default)]
struct OpenElements(Vec<String>);

impl OpenElements {
    fn track(&mut self, event: &Event) {
        match event {
            Event::Start(e) => self
                .0
                .push(String::from_utf8_lossy(e.name().as_ref()).into_owned()),
            Event::End(_) => {
                self.0.pop();
            }
            _ => {}
        }
    }
}

fn new_case(e: &BytesStart) -> Current {
    let class = attr(e, b"classname").unwrap_or_default();
    let name = attr(e, b"name").unwrap_or_default();
    Current {
        name: if class.is_empty() {
            name
        } else {
            format!("{class}::{name}")
        },
        ..Current::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4"><testcase classname="test_final_state" name="test_ok" time="0.001" /><testcase classname="test_final_state" name="test_bad" time="0.002"><failure message="AssertionError: expected &quot;a&quot; &amp; b">def test_bad():
&gt;       assert 1 == 2
E       assert 1 == 2</failure></testcase><testcase classname="test_final_state" name="test_skip"><skipped type="pytest.skip" message="not here">skip</skipped></testcase><testcase classname="" name="test_err"><error message="fixture boom" /></testcase></testsuite></testsuites>"#;

    #[test]
    fn parses_pass_fail_skip_error() {
        let cases = parse_junit(XML).unwrap();
        assert_eq!(cases.len(), 4);
        assert_eq!(cases[0].name, "test_final_state::test_ok");
        assert!(cases[0].passed);
        assert!(!cases[1].passed);
        assert!(cases[1]
            .message
            .starts_with("AssertionError: expected \"a\" & b\n"));
        assert!(cases[1].message.contains(">       assert 1 == 2"));
        assert!(cases[2].passed);
        assert_eq!(cases[2].message, "skipped: not here");
        assert_eq!(cases[3].name, "test_err");
        assert!(!cases[3].passed);
        assert_eq!(cases[3].message, "fixture boom");
    }

    #[test]
    fn malformed_xml_is_an_error() {
        assert!(parse_junit("<testsuite><testcase name='a'></testsuite>").is_err());
        assert!(parse_junit("").unwrap().is_empty());
    }

    #[test]
    fn a_cut_report_is_an_error_wherever_it_is_cut() {
        // Every prefix of a report that ends inside an element is refused,
        // never scored on the cases before the cut.
        let end = XML.rfind("</testsuites>").unwrap();
        for cut in (XML.find("<testsuites>").unwrap() + 1..end).step_by(7) {
            let Ok(cases) = parse_junit(&XML[..cut]) else {
                continue;
            };
            panic!("cut at {cut} was accepted with {} cases", cases.len());
        }
        // Cut inside a failure's text, as a capture limit cuts a long traceback.
        let in_text = XML.find("E       assert 1 == 2").unwrap() + 3;
        let err = parse_junit(&XML[..in_text]).unwrap_err();
        assert!(err.to_string().contains("incomplete"), "{err}");
        assert!(parse_junit(XML).is_ok());
    }
}
