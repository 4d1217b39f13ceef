//! The probes' pure parts: readiness, what they declare, the timeline of a run, the oversized checkpoint, the
//! start line's record of what a run continues, and which names are probes.

use super::*;

#[test]
fn a_probe_yields_at_any_checkpoint_but_the_last_and_only_when_asked() {
    assert!(yields_at(1, 3, true) && yields_at(2, 3, true));
    assert!(!yields_at(3, 3, true), "nothing is left to resume after the last checkpoint");
    assert!(!yields_at(1, 3, false));
    assert_eq!(capabilities()["yield"], json!(true));
}

#[test]
fn a_probe_is_ready_unless_told_otherwise() {
    assert_eq!(readiness(None), Ok(()));
    assert_eq!(readiness(Some(String::new())), Ok(()));
    assert_eq!(readiness(Some("The model is away.".into())), Err("The model is away.".to_owned()));
}

#[test]
fn a_probe_declares_its_options_and_no_engine() {
    let declared = declared();
    assert_eq!((declared["engine"].clone(), declared["presets"].clone()), (Value::Null, json!({})));
    let duration = &declared["options"][0];
    assert_eq!((duration["name"].as_str(), duration["default"].as_i64()), (Some("duration_ms"), Some(200)));
    assert_eq!(
        declared["options"][6],
        json!({"name": "note", "type": "string",
        "description": "Free text, recorded verbatim in the probe log's arguments."})
    );
}

#[test]
fn a_probe_declares_its_checkpoint_options() {
    let declared = declared();
    let names: Vec<&str> =
        declared["options"].as_array().expect("options").iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(&names[7..9], ["checkpoints", "oversized_checkpoint"]);
    assert_eq!(
        (declared["options"][7]["default"].as_i64(), declared["options"][8]["default"].as_bool()),
        (Some(0), Some(false))
    );
}

#[test]
fn checkpoints_are_spread_over_the_duration_between_progress_and_a_crash() {
    let ms = Duration::from_millis;
    assert_eq!(
        timeline(ms(400), 4, (2, false), true, true),
        [
            (ms(100), Beat::Progress(1)),
            (ms(200), Beat::Progress(2)),
            (ms(200), Beat::Checkpoint(1)),
            (ms(200), Beat::Crash),
            (ms(300), Beat::Progress(3)),
            (ms(400), Beat::Progress(4)),
            (ms(400), Beat::Checkpoint(2)),
            (ms(400), Beat::Oversized),
            (ms(400), Beat::End),
        ]
    );
    assert_eq!(timeline(ms(90), 0, (3, false), false, false).len(), 4, "three checkpoints and the end");
    assert_eq!(timeline(ms(90), 0, (0, false), true, false), [(ms(90), Beat::Crash), (ms(90), Beat::End)]);
    assert_eq!(
        timeline(ms(400), 0, (2, true), false, false),
        [
            (ms(100), Beat::Items(1)),
            (ms(200), Beat::Checkpoint(1)),
            (ms(300), Beat::Items(2)),
            (ms(400), Beat::Checkpoint(2)),
            (ms(400), Beat::End),
        ],
        "each block halfway since the checkpoint before"
    );
}

#[test]
fn the_oversized_checkpoint_is_one_byte_over_the_limit() {
    let checkpoint = oversized_checkpoint();
    assert_eq!(checkpoint.to_string().len(), MAX_CHECKPOINT_BYTES + 1);
    assert!(json!({ "checkpoint": checkpoint }).to_string().len() < 2 * MAX_CHECKPOINT_BYTES, "a line relayed whole");
}

#[test]
fn the_start_line_records_what_a_run_continues() {
    let parse = |env: &[(&str, &str)]| {
        let args = ["probe-1".to_owned(), "run".to_owned()];
        let variable = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
        Value::Object(continued(&Invocation::parse(&args, |_| Some(OPTIONS), variable).expect("parses")))
    };
    assert_eq!(parse(&[]), json!({"checkpoint": null, "restart_of": null}));
    assert_eq!(
        parse(&[("SCRINALIA_CHECKPOINT", "{\"step\": 2}")]),
        json!({"checkpoint": {"step": 2}, "restart_of": null})
    );
    assert_eq!(parse(&[("SCRINALIA_RESTART_OF", "r1")]), json!({"checkpoint": null, "restart_of": "r1"}));
    assert_eq!(
        parse(&[("SCRINALIA_CHECKPOINT", "{\"step\"")]),
        json!({"checkpoint": null, "checkpoint_text": "{\"step\"", "restart_of": null})
    );
}

#[test]
fn any_numbered_probe_is_a_probe() {
    for name in ["probe-1", "probe-3", "probe-4", "probe-27", "probe-123456789"] {
        assert!(is_probe(name), "{name}");
    }
    for name in ["probe-", "probe-0", "probe-07", "probe-1x", "probe--1", "probe-1234567890", "probe", "embed"] {
        assert!(!is_probe(name), "{name}");
    }
}
