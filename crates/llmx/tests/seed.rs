//! Every block example of the seed's §3 and §5 (and §7, §8), copied verbatim, parses and
//! round-trips; the structure read is pinned for a few.

use llmx::{kind, parse, write, Block, Message, Request, Value};

/// The seed's HEADER examples (§3.1), each a message on its own.
const HEADERS: [&str; 2] = [
    "HEADER:{f:Claude,t:Gemini,s:1}",
    "HEADER:{f:Orchestrator,t:ALL,s:42,b:B1}",
];

/// Every block example of §3.2–§3.10, §7 and §8, verbatim.
const BLOCKS: [&str; 17] = [
    r#"CTX:{p:myapp,f:["src/api.ts","src/db.ts"],st:{phase:"P1",env:"dev"},issue:"PROJ-123"}"#,
    r#"REQ:{o:"implement user authentication",pr:2,d:["PROJ-100"],exp:["SECURITY-EXPERT"]}"#,
    r#"PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:I),(i:3,t:"write tests",s:P)]"#,
    r#"ACT:{i:A1,op:edit,tgt:"p:src/auth.ts#L42",args:{action:"add validation"}}"#,
    r#"ACT:{op:shell,tgt:"npm test"}"#,
    r#"OBS:{ai:A1,s:OK,c:{lines:45,modified:true}}"#,
    r#"OBS:{ai:A2,s:ERR,e:"file not found: src/missing.ts"}"#,
    r#"BLK:{w:"missing API credentials",a:["use mock","wait for config","skip feature"],esc:true}"#,
    r#"ASK:{q:"which auth method?",o:["JWT","session","OAuth2"],def:"JWT"}"#,
    r#"END:{n:"security review",t:["npm test","npm run lint"],r:["needs load testing"],del:["src/auth.ts","src/auth.test.ts"]}"#,
    r#"RES:{o:"ACK",msg:"proceeding with implementation"}"#,
    r#"RES:{o:"JWT",msg:"will use RS256 signing"}"#,
    r#"OBS:{ai:A1,s:ERR,e:"permission denied"}"#,
    r#"RES:{o:"NACK",msg:"parse error: missing required field 'o' in REQ"}"#,
    r#"RES:{o:"WARN",msg:"unknown message type: CUSTOM ignored"}"#,
    r#"X_TYPENAME:{field:value}"#,
    r#"REQ:{o:"task",pr:2,x_team:"frontend",x_deadline:"2024-01-15"}"#,
];

/// §5.1, verbatim.
const BATCH: &str = r#"HEADER:{f:Claude,t:ALL,s:1,b:B1}
ACT:{i:A1,op:read,tgt:"p:file1.ts"}
ACT:{i:A2,op:read,tgt:"p:file2.ts"}
ACT:{i:A3,op:search,tgt:"p:src/",args:{q:"TODO"}}
"#;

/// §5.2, verbatim.
const BATCH_RESPONSES: &str = r#"HEADER:{f:Gemini,t:Claude,s:2,b:B1}
OBS:{ai:A1,s:OK,c:{lines:100}}
OBS:{ai:A3,s:OK,c:{matches:5}}
OBS:{ai:A2,s:OK,c:{lines:50}}
"#;

fn round_trip(text: &str) -> Message {
    let m = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let written = write(&m);
    let back = parse(&written).unwrap_or_else(|e| panic!("{e}\nwritten:\n{written}"));
    assert_eq!(back, m, "written:\n{written}");
    m
}

#[test]
fn every_header_example_parses_and_round_trips() {
    let m = round_trip(HEADERS[1]);
    assert_eq!(m.header.from, "Orchestrator");
    assert_eq!(m.header.to, "ALL");
    assert_eq!(m.header.seq, 42);
    assert_eq!(m.header.batch.as_deref(), Some("B1"));
    let m = round_trip(HEADERS[0]);
    assert_eq!(
        (m.header.from.as_str(), m.header.seq, m.header.batch),
        ("Claude", 1, None)
    );
    // The schema line is notation (`b?:`), not a message.
    assert!(parse("HEADER:{f:SENDER,t:TARGET,s:SEQUENCE,b?:BATCH_ID}").is_err());
}

#[test]
fn every_block_example_parses_and_round_trips() {
    for block in BLOCKS {
        let text = format!("{}\n{block}\n", HEADERS[0]);
        let m = round_trip(&text);
        assert_eq!(m.blocks.len(), 1, "{block}");
        assert!(block.starts_with(&format!("{}:", m.blocks[0].kind)));
    }
    // All of them in one message, and written compactly they are the seed's text again.
    let all = format!("{}\n{}\n", HEADERS[0], BLOCKS.join("\n"));
    let m = round_trip(&all);
    assert_eq!(m.blocks.len(), BLOCKS.len());
    assert_eq!(write(&m), all);
}

#[test]
fn the_batch_and_its_responses_parse_and_round_trip() {
    let m = round_trip(BATCH);
    assert_eq!(m.header.batch.as_deref(), Some("B1"));
    let ids: Vec<_> = m.blocks_of(kind::ACT).filter_map(|b| b.str("i")).collect();
    assert_eq!(ids, ["A1", "A2", "A3"]);
    assert_eq!(write(&m), BATCH);

    let r = round_trip(BATCH_RESPONSES);
    let ais: Vec<_> = r.blocks_of(kind::OBS).filter_map(|b| b.str("ai")).collect();
    assert_eq!(ais, ["A1", "A3", "A2"], "out of order, as the seed says");
    assert_eq!(write(&r), BATCH_RESPONSES);
}

#[test]
fn the_structure_read_is_the_seeds() {
    let text = format!(
        "{}\n{}\n{}\n{}\n",
        HEADERS[0], BLOCKS[0], BLOCKS[1], BLOCKS[2]
    );
    let m = round_trip(&text);
    let ctx = m.first(kind::CTX).unwrap();
    assert_eq!(ctx.get("p"), Some(&Value::Symbol("myapp".into())));
    assert_eq!(ctx.strs("f").unwrap(), ["src/api.ts", "src/db.ts"]);
    assert_eq!(
        ctx.get("st").unwrap().get("env").unwrap().as_str(),
        Some("dev")
    );

    let req = Request::from_block(m.first(kind::REQ).unwrap()).unwrap();
    assert_eq!(req.objective, "implement user authentication");
    assert_eq!(req.priority, 2);
    assert_eq!(req.deps, ["PROJ-100"]);
    assert_eq!(req.experts, ["SECURITY-EXPERT"]);

    let plan = m.first(kind::PLAN).unwrap();
    let steps: Vec<_> = plan
        .items()
        .iter()
        .map(|s| {
            (
                s.get("i").unwrap().as_i64().unwrap(),
                s.get("s").unwrap().as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(steps, [(1, "C"), (2, "I"), (3, "P")]);
    assert!(matches!(plan.items()[0], Value::Tuple(_)));

    // x_ fields and X_ blocks are kept, and X_ is not "unknown".
    let ext = format!(
        "{}\n{}\n{}\nCUSTOM:{{a:1}}\n",
        HEADERS[0], BLOCKS[15], BLOCKS[16]
    );
    let m = round_trip(&ext);
    let x: Vec<_> = m.blocks[1].extensions().map(|(k, _)| k.as_str()).collect();
    assert_eq!(x, ["x_team", "x_deadline"]);
    assert!(m.blocks[0].is_extension());
    let unknown: Vec<_> = m.unknown_blocks().map(|b| b.kind.as_str()).collect();
    assert_eq!(unknown, ["CUSTOM"]);
    assert_eq!(
        write(&Message {
            header: m.header.clone(),
            blocks: vec![Block::warn_unknown("CUSTOM")]
        })
        .lines()
        .nth(1),
        Some(BLOCKS[14])
    );
}

#[test]
fn enums_of_the_data_type_table_read_as_enums() {
    let m = round_trip("HEADER:{f:a,t:b,s:0}\nX_SPEC:{s:P|I|C|X,b:true|false}");
    assert_eq!(
        m.blocks[0].get("s"),
        Some(&Value::Enum(vec![
            "P".into(),
            "I".into(),
            "C".into(),
            "X".into()
        ]))
    );
    assert_eq!(
        m.blocks[0].get("b"),
        Some(&Value::Enum(vec!["true".into(), "false".into()]))
    );
}
