//! A CARP request may hold integers past 64 bits anywhere JSON allows them (parameters, task
//! members, context): they are read, kept exactly as written, and hashed exactly. serde's
//! `flatten` could not read one between 2^64 and 2^128 and refused the request with
//! "invalid type: integer ... as u128".

use cra_carp::validate::parse_request_text;

#[test]
fn a_request_with_integers_past_64_bits_is_read_with_them_as_written() {
    for n in [
        "18446744073709551616",
        "123456789012345678901",
        "-170141183460469231731687303715884105728",
        "1234567890123456789012345678901234567890",
    ] {
        let text = format!(
            r#"{{"carp_version":"1.0","request_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d01","timestamp":"2026-12-03T08:00:00Z","operation":"execute",
               "requester":{{"agent_id":"a","session_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d02","x-n":{n}}},
               "task":{{"goal":"g","intended_parameters":{{"x.y":{{"n":{n}}}}}}},
               "context":{{"n":{n}}},
               "execution":{{"resolution_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d03","action_id":"x.y","parameters":{{"amount":{n},"list":[{n}]}}}},
               "x-top":{n}}}"#
        );
        let request = parse_request_text(&text).unwrap_or_else(|e| panic!("{n}: {e:?}"));
        let execution = request.execution.as_ref().unwrap();
        assert_eq!(execution.parameters["amount"].to_string(), n);
        assert_eq!(execution.parameters["list"][0].to_string(), n);
        assert_eq!(request.requester.extra["x-n"].to_string(), n);
        assert_eq!(request.context.as_ref().unwrap()["n"].to_string(), n);
        let task = request.task.as_ref().unwrap();
        assert_eq!(
            task.intended_parameters().unwrap()["x.y"]["n"].to_string(),
            n
        );
        assert_eq!(request.extra["x-top"].to_string(), n);
        let again = serde_json::to_string(&request).unwrap();
        assert_eq!(
            parse_request_text(&again).unwrap(),
            request,
            "a round trip keeps it"
        );
    }
}

/// Numbers keep their text through the request (what the agent sent is what is recorded).
#[test]
fn every_number_in_a_request_is_kept_as_written() {
    let text = r#"{"carp_version":"1.0","request_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d01","timestamp":"2026-12-03T08:00:00Z","operation":"execute",
        "requester":{"agent_id":"a","session_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d02"},
        "context":{"z":-0},
        "execution":{"resolution_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d03","action_id":"x.y","parameters":{"z":-0,"f":1.50}}}"#;
    let request = parse_request_text(text).unwrap();
    let parameters = &request.execution.as_ref().unwrap().parameters;
    let written: Vec<String> = ["z", "f"]
        .iter()
        .map(|k| parameters[k].to_string())
        .collect();
    assert_eq!(written, ["-0", "1.50"]);
    assert_eq!(request.context.unwrap()["z"].to_string(), "-0");
}

#[test]
fn absent_and_null_members_read_as_before() {
    let text = r#"{"carp_version":"1.0","request_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d01","timestamp":"2026-12-03T08:00:00Z","operation":"execute",
        "requester":{"agent_id":"a","session_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d02","parent_session_id":null},
        "execution":{"resolution_id":"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d03","action_id":"x.y"}}"#;
    let request = parse_request_text(text).unwrap();
    assert_eq!(request.requester.parent_session_id, None);
    assert_eq!(request.execution.unwrap().parameters, serde_json::json!({}));
    assert!(request.task.is_none() && request.atlas_ids.is_none());
}
