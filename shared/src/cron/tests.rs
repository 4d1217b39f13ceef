use chrono::{DateTime, Duration, TimeZone, Utc};

use super::{CronError, CronSchedule};

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("a test instant").with_timezone(&Utc)
}

fn schedule(expression: &str, zone: &str) -> CronSchedule {
    CronSchedule::parse(expression, zone).expect("a valid expression")
}

fn next(expression: &str, zone: &str, after: &str) -> DateTime<Utc> {
    schedule(expression, zone).next_after(utc(after)).expect("a next fire")
}

fn upcoming(expression: &str, zone: &str, after: &str, n: usize) -> Vec<DateTime<Utc>> {
    schedule(expression, zone).upcoming(utc(after), n)
}

fn instants(texts: &[&str]) -> Vec<DateTime<Utc>> {
    texts.iter().map(|t| utc(t)).collect()
}

/// Every `step` of real time from `first` to `last`, both included.
fn every(first: &str, last: &str, step: Duration) -> Vec<DateTime<Utc>> {
    let (first, last) = (utc(first), utc(last));
    std::iter::successors(Some(first), |&t| Some(t + step)).take_while(|&t| t <= last).collect()
}

fn error(expression: &str) -> (Option<&'static str>, String) {
    match CronSchedule::parse(expression, "UTC") {
        Err(CronError::Expression { field, message }) => (field, message),
        other => panic!("{expression:?} gave {other:?}"),
    }
}

// Daylight saving: Europe/Berlin 2026-03-29 02:00 CET → 03:00 CEST (01:00 UTC) and 2026-10-25 03:00 CEST →
// 02:00 CET (01:00 UTC); America/New_York 2026-03-08 02:00 EST → 03:00 EDT (07:00 UTC) and 2026-11-01 02:00 EDT
// → 01:00 EST (06:00 UTC).

#[test]
fn daily_time_in_the_spring_gap_fires_once_after_the_gap() {
    assert_eq!(
        upcoming("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", 3),
        instants(&["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"])
    );
    assert_eq!(
        upcoming("30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", 3),
        instants(&["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"])
    );
    // Several times in the gap, and one right after it, still fire once at the end of the gap.
    assert_eq!(
        upcoming("0,15,59 2,3 * * *", "Europe/Berlin", "2026-03-29T00:30:00Z", 4),
        instants(&["2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z", "2026-03-29T01:59:00Z", "2026-03-30T00:00:00Z"])
    );
    // Searching from just before the transition, and from it: the gap's fire is not repeated.
    assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-03-29T00:59:59.5Z"), utc("2026-03-29T01:00:00Z"));
    assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z"), utc("2026-03-30T00:30:00Z"));
    // Seconds too: 02:30:30 does not exist, so 03:00:00.
    assert_eq!(next("30 30 2 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z"), utc("2026-03-29T01:00:00Z"));
}

#[test]
fn daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() {
    assert_eq!(
        upcoming("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", 3),
        instants(&["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"])
    );
    assert_eq!(
        upcoming("30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z", 3),
        instants(&["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"])
    );
    // Searching from inside the second pass does not fire the repeat.
    assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-10-25T01:10:00Z"), utc("2026-10-26T01:30:00Z"));
    // Specific hours, every 20 minutes: the first pass only.
    assert_eq!(
        upcoming("*/20 2 * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", 4),
        instants(&["2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z", "2026-10-26T01:00:00Z"])
    );
    // Every second of 02:00–02:59 local: 3600 fires on the fall-back day (the first pass), one on the spring day.
    let second_of_two = schedule("* * 2 * * *", "Europe/Berlin");
    let fall = second_of_two.fires_between(utc("2026-10-24T23:00:00Z"), utc("2026-10-25T23:00:00Z"), 10_000);
    assert_eq!(fall, every("2026-10-25T00:00:00Z", "2026-10-25T00:59:59Z", Duration::seconds(1)));
    let spring = second_of_two.fires_between(utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z"), 10_000);
    assert_eq!(spring, instants(&["2026-03-29T01:00:00Z"]));
    assert_eq!(
        upcoming("0 1-3 * * *", "America/New_York", "2026-11-01T00:00:00Z", 3),
        instants(&["2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"])
    );
}

#[test]
fn sub_daily_expressions_follow_real_time_across_every_transition() {
    let quarter = Duration::minutes(15);
    let hour = Duration::hours(1);
    for (zone, from, to) in [
        ("Europe/Berlin", "2026-03-28T23:00:00Z", "2026-03-29T03:00:00Z"),
        ("Europe/Berlin", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z"),
        ("America/New_York", "2026-03-08T05:00:00Z", "2026-03-08T09:00:00Z"),
        ("America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z"),
    ] {
        let quarters = schedule("*/15 * * * *", zone).fires_between(utc(from), utc(to), 1000);
        assert_eq!(quarters, every(from, to, quarter)[1..], "*/15 in {zone} from {from}");
        let hours = schedule("0 * * * *", zone).fires_between(utc(from), utc(to), 1000);
        assert_eq!(hours, every(from, to, hour)[1..], "hourly in {zone} from {from}");
    }
    // An hourly job at :05 skips the hour that does not exist and repeats the one that happens twice.
    assert_eq!(
        upcoming("5 * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 2),
        instants(&["2026-03-29T00:05:00Z", "2026-03-29T01:05:00Z"])
    );
    assert_eq!(
        upcoming("5 * * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", 3),
        instants(&["2026-10-25T00:05:00Z", "2026-10-25T01:05:00Z", "2026-10-25T02:05:00Z"])
    );
    // Every second across the spring transition.
    assert_eq!(
        upcoming("* * * * * *", "Europe/Berlin", "2026-03-29T00:59:58Z", 3),
        instants(&["2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z", "2026-03-29T01:00:01Z"])
    );
}

#[test]
fn shorthands() {
    let after = "2026-05-13T10:20:30Z"; // a Wednesday
    let cases = [
        ("@hourly", "UTC", "2026-05-13T11:00:00Z"),
        ("@daily", "UTC", "2026-05-14T00:00:00Z"),
        ("@midnight", "UTC", "2026-05-14T00:00:00Z"),
        ("@weekly", "UTC", "2026-05-17T00:00:00Z"),
        ("@monthly", "UTC", "2026-06-01T00:00:00Z"),
        ("@yearly", "UTC", "2027-01-01T00:00:00Z"),
        ("@annually", "UTC", "2027-01-01T00:00:00Z"),
        ("@hourly", "Europe/Berlin", "2026-05-13T11:00:00Z"),
        ("@daily", "Europe/Berlin", "2026-05-13T22:00:00Z"),
        ("@midnight", "Europe/Berlin", "2026-05-13T22:00:00Z"),
        ("@weekly", "Europe/Berlin", "2026-05-16T22:00:00Z"),
        ("@monthly", "Europe/Berlin", "2026-05-31T22:00:00Z"),
        ("@yearly", "Europe/Berlin", "2026-12-31T23:00:00Z"),
        ("@annually", "Europe/Berlin", "2026-12-31T23:00:00Z"),
        ("@hourly", "Asia/Kolkata", "2026-05-13T10:30:00Z"),
        ("@DAILY", "America/New_York", "2026-05-14T04:00:00Z"),
    ];
    for (expression, zone, expected) in cases {
        assert_eq!(next(expression, zone, after), utc(expected), "{expression} in {zone}");
    }
    let weekly = schedule("  @weekly ", "Europe/Berlin");
    assert_eq!((weekly.expression(), weekly.time_zone(), weekly.has_seconds()), ("@weekly", "Europe/Berlin", false));
}

#[test]
fn six_fields_have_seconds() {
    let every_second = schedule("*/1 * * * * *", "UTC");
    assert!(every_second.has_seconds());
    assert_eq!(
        every_second.upcoming(utc("2026-05-13T10:20:30.250Z"), 3),
        instants(&["2026-05-13T10:20:31Z", "2026-05-13T10:20:32Z", "2026-05-13T10:20:33Z"])
    );
    assert_eq!(
        upcoming("30 0 9 * * MON-FRI", "UTC", "2026-05-15T10:00:00Z", 3),
        instants(&["2026-05-18T09:00:30Z", "2026-05-19T09:00:30Z", "2026-05-20T09:00:30Z"])
    );
    assert_eq!(next("30 0 9 * * MON-FRI", "Europe/Berlin", "2026-05-15T06:00:00Z"), utc("2026-05-15T07:00:30Z"));
    assert!(!schedule("0 9 * * *", "UTC").has_seconds());
}

#[test]
fn either_day_field_matches_when_both_are_restricted() {
    let after = "2026-05-13T10:00:00Z";
    let days = |expression: &str| -> Vec<u32> {
        use chrono::Datelike;
        upcoming(expression, "UTC", after, 7).iter().map(|t| t.day()).collect()
    };
    // Fridays in May and June 2026: 15, 22, 29, 5, 12, 19; 13 June is a Saturday.
    assert_eq!(days("0 0 13 * FRI"), [15, 22, 29, 5, 12, 13, 19]);
    assert_eq!(days("0 0 * * FRI"), [15, 22, 29, 5, 12, 19, 26]);
    assert_eq!(days("0 0 13 * *"), [13, 13, 13, 13, 13, 13, 13]);
    // A day-of-month written with `*` is not a restriction: both must match.
    assert_eq!(days("0 0 */2 * FRI"), [15, 29, 5, 19, 3, 17, 31]);
}

#[test]
fn names_sunday_as_seven_and_stepped_ranges() {
    let after = "2026-05-13T10:20:30Z";
    assert_eq!(next("0 12 * JAN,jul Mon", "UTC", after), utc("2026-07-06T12:00:00Z"));
    for sunday in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"] {
        assert_eq!(next(sunday, "UTC", after), utc("2026-05-17T00:00:00Z"), "{sunday}");
    }
    let weekend =
        instants(&["2026-05-15T00:00:00Z", "2026-05-16T00:00:00Z", "2026-05-17T00:00:00Z", "2026-05-22T00:00:00Z"]);
    for expression in ["0 0 * * 5-7", "0 0 * * FRI-SUN", "0 0 * * 5,6,0"] {
        assert_eq!(upcoming(expression, "UTC", after, 4), weekend, "{expression}");
    }
    assert_eq!(
        upcoming("1-30/10 * * * *", "UTC", after, 4),
        instants(&["2026-05-13T10:21:00Z", "2026-05-13T11:01:00Z", "2026-05-13T11:11:00Z", "2026-05-13T11:21:00Z"])
    );
    assert_eq!(
        upcoming("0 0 1 FEB-DEC/5 *", "UTC", after, 3),
        instants(&["2026-07-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-02-01T00:00:00Z"])
    );
    assert_eq!(next("45/5 * * * *", "UTC", after), utc("2026-05-13T10:45:00Z"));
    // `a/n` runs to the end of the field: Friday and Saturday, not Sunday again.
    assert_eq!(
        upcoming("0 0 * * 5/1", "UTC", after, 3),
        instants(&["2026-05-15T00:00:00Z", "2026-05-16T00:00:00Z", "2026-05-22T00:00:00Z"])
    );
}

#[test]
fn rare_expressions_are_found_quickly_and_far_ahead() {
    // 29 February: 2028, 2032, …; over 2100, which is not a leap year, to 2104.
    let leap = schedule("0 0 29 2 *", "America/New_York");
    let fires = leap.upcoming(utc("2026-01-01T00:00:00Z"), 20);
    assert_eq!(fires[0], utc("2028-02-29T05:00:00Z"));
    use chrono::Datelike;
    let years: Vec<i32> = fires.iter().map(|t| t.year()).collect();
    let expected: Vec<i32> = (2028..=2108).step_by(4).filter(|&y| y != 2100).take(20).collect();
    assert_eq!(years, expected);
    // A 29 February that is a Sunday (`*/7` day-of-week is Sunday only, and written with `*`, so both must match).
    assert_eq!(next("0 0 29 2 */7", "UTC", "2026-01-01T00:00:00Z"), utc("2032-02-29T00:00:00Z"));
    // Many fires in a row stay cheap: a year of quarter hours in Berlin, without a duplicate.
    let quarters = schedule("*/15 * * * *", "Europe/Berlin");
    let year = quarters.fires_between(utc("2026-01-01T00:00:00Z"), utc("2027-01-01T00:00:00Z"), 100_000);
    assert_eq!(year.len(), 365 * 24 * 4);
    assert!(year.windows(2).all(|w| w[1] - w[0] == Duration::minutes(15)));
}

#[test]
fn fires_between_is_bounded() {
    let hourly = schedule("@hourly", "UTC");
    let (from, to) = (utc("2026-05-13T10:00:00Z"), utc("2026-05-13T14:00:00Z"));
    assert_eq!(
        hourly.fires_between(from, to, 100),
        every("2026-05-13T11:00:00Z", "2026-05-13T14:00:00Z", Duration::hours(1))
    );
    assert_eq!(hourly.fires_between(from, to, 2), instants(&["2026-05-13T11:00:00Z", "2026-05-13T12:00:00Z"]));
    assert!(hourly.fires_between(from, from, 100).is_empty());
    assert!(hourly.upcoming(from, 0).is_empty());
    assert_eq!(
        hourly.next_after(Utc.with_ymd_and_hms(2026, 5, 13, 10, 59, 59).single().expect("an instant")),
        Some(utc("2026-05-13T11:00:00Z"))
    );
}

#[test]
fn error_sentences() {
    assert_eq!(
        error("61 * * * *"),
        (
            Some("minute"),
            "The cron expression \"61 * * * *\" is not valid: minute 61 is out of range (0–59).".to_owned()
        )
    );
    assert_eq!(
        error("* * *"),
        (
            None,
            "The cron expression \"* * *\" has 3 fields; it needs 5 (minute hour day-of-month month day-of-week) \
             or 6 with a leading seconds field."
                .to_owned()
        )
    );
    assert_eq!(
        error("@fortnightly"),
        (None, "\"@fortnightly\" is not a shorthand; use @hourly, @daily, @weekly, @monthly or @yearly.".to_owned())
    );
    assert_eq!(
        CronSchedule::parse("0 * * * *", "Mars/Olympus").expect_err("an unknown zone"),
        CronError::TimeZone {
            message: "\"Mars/Olympus\" is not an IANA time zone (for example \"Europe/Berlin\" or \"UTC\").".to_owned()
        }
    );
    assert_eq!(
        error("0 0 30 2 *"),
        (
            Some("day-of-month"),
            "The cron expression \"0 0 30 2 *\" never fires: none of the months it allows has a day-of-month it \
             allows."
                .to_owned()
        )
    );
    assert_eq!(
        error("abc * * * *").1,
        "The cron expression \"abc * * * *\" is not valid: minute \"abc\" is not a number (0–59)."
    );
    assert_eq!(
        error("* * * * MON-abc").1,
        "The cron expression \"* * * * MON-abc\" is not valid: in day-of-week \"MON-abc\", \"abc\" is neither a \
         number (0–7) nor a day name (SUN–SAT)."
    );
    assert_eq!(
        error("*/0 * * * *").1,
        "The cron expression \"*/0 * * * *\" is not valid: the step in minute \"*/0\" is 0; it must be at least 1."
    );
    assert_eq!(
        error("* 10-5 * * *").1,
        "The cron expression \"* 10-5 * * *\" is not valid: the hour range \"10-5\" runs backwards; write the \
         smaller value first."
    );
    assert_eq!(
        error("").1,
        "The cron expression is empty; it needs 5 (minute hour day-of-month month day-of-week) or 6 with a leading \
         seconds field."
    );
    assert_eq!(error("*").1.split(';').next(), Some("The cron expression \"*\" has 1 field"));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        ("* * * *", None),
        ("* * * * * * *", None),
        ("@reboot", None),
        ("60 * * * * *", Some("second")),
        ("* 60 * * * *", Some("minute")),
        ("* 24 * * *", Some("hour")),
        ("* * 0 * *", Some("day-of-month")),
        ("* * 32 * *", Some("day-of-month")),
        ("* * * 0 *", Some("month")),
        ("* * * 13 *", Some("month")),
        ("* * * * 8", Some("day-of-week")),
        ("x * * * * *", Some("second")),
        ("abc * * * *", Some("minute")),
        ("* 1h * * *", Some("hour")),
        ("* * L * *", Some("day-of-month")),
        ("* * * FOO *", Some("month")),
        ("* * * * abc", Some("day-of-week")),
        ("* * * * MON#2", Some("day-of-week")),
        ("*/0 * * * *", Some("minute")),
        ("* */0 * * *", Some("hour")),
        ("* * 1-10/0 * *", Some("day-of-month")),
        ("* * * * */x", Some("day-of-week")),
        ("30-10 * * * *", Some("minute")),
        ("* 10-5 * * *", Some("hour")),
        ("* * 20-10 * *", Some("day-of-month")),
        ("* * * DEC-JAN *", Some("month")),
        ("* * * * SAT-MON", Some("day-of-week")),
        ("1,,2 * * * *", Some("minute")),
        ("* 1, * * *", Some("hour")),
        ("* * -5 * *", Some("day-of-month")),
        ("99999999999 * * * *", Some("minute")),
        ("0 0 31 2 *", Some("day-of-month")),
        ("0 0 31 4,6,9,11 *", Some("day-of-month")),
        ("0 0 30,31 2 */2", Some("day-of-month")),
    ];
    for (expression, field) in cases {
        let (found, message) = error(expression);
        assert_eq!(found, field, "{expression}: {message}");
        assert!(message.ends_with('.'), "{message}");
        if let Some(field) = field {
            assert!(message.contains(field), "{message}");
        }
    }
    assert!(CronSchedule::parse("0 * * * *", "").is_err());
    assert!(CronSchedule::parse("0 * * * *", "europe/berlin").is_err());
    // Both day fields restricted: a Monday is enough, so 31 February does not stop it.
    assert!(CronSchedule::parse("0 0 31 2 MON", "UTC").is_ok());
}
