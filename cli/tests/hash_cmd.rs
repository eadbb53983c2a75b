//! `kubelet-rehash hash` and `versions` through the binary.

mod under_test;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use under_test::kubelet_rehash;

fn golden() -> PathBuf {
    testtools::fixtures_dir().join("golden")
}

fn run(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = kubelet_rehash()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The binary may exit (usage error) before reading its input: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn all_versions_of_the_golden_specs_reproduce_hashes_jsonl_byte_for_byte() {
    let specs = golden().join("specs.jsonl");
    let (code, out, err) = run(
        &["hash", "--kubelet-version", "all", specs.to_str().unwrap()],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let want = std::fs::read_to_string(golden().join("hashes.jsonl")).unwrap();
    assert!(
        out == want,
        "output differs from fixtures/golden/hashes.jsonl"
    );
}

#[test]
fn bad_lines_are_reported_in_place_and_the_rest_goes_on() {
    let input = b"{\"id\":\"a\",\"container\":{\"name\":\"x\",\"image\":\"busybox\"}}\nnot json\n{\"id\":\"q\",\"container\":{\"name\":\"x\",\"resources\":{\"limits\":{\"cpu\":\"1.2.3\"}}}}\n{\"id\":\"b\",\"container\":{\"name\":\"y\"}}\n";
    let (code, out, _) = run(&["hash", "-k", "1.22", "-"], input);
    assert_eq!(code, 1, "a bad line makes the exit code non-zero");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0]["id"], "a");
    assert!(lines[0]["hash"].is_string());
    assert_eq!(
        lines[1]["line"], 2,
        "a line that does not parse is named by its number"
    );
    assert!(lines[1]["error"].as_str().unwrap().contains("invalid JSON"));
    assert_eq!(lines[2]["id"], "q");
    let e = lines[2]["error"].as_str().unwrap();
    assert!(
        e.contains("resources.limits.cpu") && e.contains("1.2.3"),
        "names the field and value: {e}"
    );
    assert_eq!(lines[3]["id"], "b", "input order is kept");
}

#[test]
fn pods_podlists_and_bare_containers_are_accepted() {
    let pod = br#"{"kind":"Pod","metadata":{"namespace":"ns","name":"p","uid":"u"},
        "spec":{"initContainers":[{"name":"init","image":"busybox"}],"containers":[{"name":"app","image":"nginx"}]}}"#;
    let (code, out, err) = run(&["hash", "-k", "1.31", "-k", "1.16"], pod);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<String> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                v["id"].as_str().unwrap(),
                v["version"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            "ns/p/init 1.16",
            "ns/p/init 1.31",
            "ns/p/app 1.16",
            "ns/p/app 1.31"
        ],
        "versions ascending per container"
    );
    let list = format!(
        "{{\"kind\":\"List\",\"items\":[{}]}}",
        String::from_utf8_lossy(pod)
    );
    let (code, out2, _) = run(&["hash", "-k", "1.31,1.16"], list.as_bytes());
    assert_eq!(code, 0);
    assert_eq!(out2, out, "a List of the Pod gives the same lines");
    let (code, out, _) = run(
        &["hash", "-k", "1.31"],
        br#"{"name":"test_container","image":"foo/image:v1"}"#,
    );
    assert_eq!(code, 0);
    assert!(out.contains("\"id\": \"test_container\""), "{out}");
}

#[test]
fn explain_prints_the_hashed_text() {
    let (code, out, _) = run(
        &["hash", "-k", "1.31", "--explain"],
        br#"{"name":"test_container","image":"foo/image:v1"}"#,
    );
    assert_eq!(code, 0);
    assert!(
        out.contains(r#"hash json: {"image":"foo/image:v1","name":"test_container"}"#),
        "{out}"
    );
    assert!(out.contains("hash: 8e45cbd0"), "{out}");
    assert!(out.contains("([]uint8)[123 34 105"), "{out}");
}

#[test]
fn versions_outside_the_range_are_usage_errors_naming_the_range() {
    for v in ["1.7", "1.39", "2.0", "banana"] {
        let (code, _, err) = run(&["hash", "-k", v], b"{}");
        assert_eq!(code, 2, "{v}: usage error");
        assert!(err.contains(v), "{v}: {err}");
    }
    let (_, _, err) = run(&["hash", "-k", "1.7"], b"{}");
    assert!(err.contains("1.8 to 1.38"), "{err}");
    // a newer kubelet than this build knows: refused, saying why
    let (_, _, err) = run(&["hash", "-k", "1.39"], b"{}");
    assert!(
        err.contains("newer than this kubelet-rehash knows") && err.contains("1.8 to 1.38"),
        "{err}"
    );
}

#[test]
fn versions_lists_every_supported_version() {
    let (code, out, _) = run(&["versions", "-o", "json"], b"");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 31, "1.8 through 1.38");
    assert_eq!(rows[0]["version"], "1.8");
    assert_eq!(rows[8]["form"], "json");
    // The golden README's equivalence classes: 17 of them.
    assert_eq!(rows.last().unwrap()["equivalence_class"], 16);
}
