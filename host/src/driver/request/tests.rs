use super::*;
use crate::bindings::message::{Block, Message, Role};

fn base(system: Option<&str>) -> Base {
    Base {
        model: "m-1".into(),
        max_tokens: 512,
        system: system.map(str::to_string),
    }
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} things"),
        input_schema: r#"{"type":"object"}"#.into(),
    }
}

fn asked() -> InferenceRequest {
    InferenceRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text("hi".into())],
        }],
        system: None,
        tools: None,
        max_tokens: None,
        params: LoopParams {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    }
}

fn refused(base: &Base, asked: InferenceRequest, all: &[ToolSpec]) -> String {
    base.build(asked, all).err().expect("refused")
}

#[test]
fn a_plain_request_keeps_the_json_form_drivers_used_to_receive() {
    let request = base(Some("be brief"))
        .build(asked(), &[spec("echo")])
        .expect("built");
    assert_eq!(
        json_form(&request),
        r#"{"model":"m-1","max_tokens":512,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"name":"echo","description":"echo things","parameters":{"type":"object"}}],"params":{}}"#
    );
}

#[test]
fn the_loop_s_system_addition_follows_the_capsule_s_prompt() {
    let mut a = asked();
    a.system = Some("Plan first.".into());
    let with_own = base(Some("[Capsule]"))
        .build(a.clone(), &[])
        .expect("built");
    assert_eq!(with_own.system.as_deref(), Some("[Capsule]\n\nPlan first."));
    let alone = base(None).build(a, &[]).expect("built");
    assert_eq!(alone.system.as_deref(), Some("Plan first."));
}

#[test]
fn a_subset_of_tools_is_offered_in_the_order_named() {
    let mut a = asked();
    a.tools = Some(vec!["b".into(), "a".into()]);
    let request = base(None)
        .build(a, &[spec("a"), spec("b"), spec("c")])
        .expect("built");
    let names: Vec<&str> = request.tools.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    let mut none = asked();
    none.tools = Some(Vec::new());
    assert!(
        base(None)
            .build(none, &[spec("a")])
            .expect("built")
            .tools
            .is_empty()
    );
}

#[test]
fn an_unknown_tool_is_refused_naming_the_capsule_s_tools() {
    let mut a = asked();
    a.tools = Some(vec!["a".into(), "grep".into()]);
    assert_eq!(
        refused(&base(None), a.clone(), &[spec("a"), spec("b")]),
        "the loop offered tool 'grep', which this capsule does not have (its tools: a, b)"
    );
    assert_eq!(
        refused(&base(None), a, &[]),
        "the loop offered tool 'a', which this capsule does not have (it has no tools)"
    );
}

#[test]
fn params_out_of_range_are_refused() {
    let cases: [(fn(&mut LoopParams), &str); 5] = [
        (
            |p| p.temperature = Some(3.0),
            "params.temperature must be between 0 and 2; the loop sent 3",
        ),
        (
            |p| p.top_p = Some(1.5),
            "params.top_p must be above 0 and at most 1; the loop sent 1.5",
        ),
        (
            |p| p.top_p = Some(0.0),
            "params.top_p must be above 0 and at most 1; the loop sent 0",
        ),
        (
            |p| p.stop = vec!["a".into(); 5],
            "params.stop holds at most 4 sequences; the loop sent 5",
        ),
        (
            |p| p.stop = vec!["".into()],
            "params.stop holds an empty sequence",
        ),
    ];
    for (set, why) in cases {
        let mut a = asked();
        set(&mut a.params);
        assert_eq!(refused(&base(None), a, &[]), why);
    }
}

#[test]
fn params_in_range_reach_the_driver_and_its_json_form() {
    let mut a = asked();
    a.params = LoopParams {
        temperature: Some(0.5),
        top_p: Some(1.0),
        stop: vec!["END".into()],
    };
    let request = base(None).build(a, &[]).expect("built");
    assert_eq!(request.params.temperature, Some(0.5));
    assert!(
        json_form(&request)
            .ends_with(r#""params":{"temperature":0.5,"top_p":1.0,"stop":["END"]}}"#)
    );
}

#[test]
fn the_output_cap_may_be_lowered_but_not_raised() {
    let mut a = asked();
    a.max_tokens = Some(100);
    assert_eq!(
        base(None).build(a.clone(), &[]).expect("built").max_tokens,
        100
    );
    for n in [0, 513] {
        a.max_tokens = Some(n);
        assert_eq!(
            refused(&base(None), a.clone(), &[]),
            format!(
                "max-tokens must be between 1 and inference.max_tokens (512); the loop sent {n}"
            )
        );
    }
}
