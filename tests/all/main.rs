//! Every end-to-end test, in one binary: the real `mur`, real components compiled from
//! source, real sockets on 127.0.0.1. One module per area; `common` holds what they share.

#[macro_use]
mod common;

mod a2a;
// The v1 door's tests again, against capsules hosted by `mur serve`.
mod a2a_sdk;
#[path = "a2a.rs"]
#[expect(
    clippy::duplicate_mod,
    reason = "the same tests, compiled for the other host"
)]
mod a2a_served;
mod check;
mod check_driver_hook;
mod components;
mod confined_shell;
mod containment;
mod cpu_shares;
mod deadlines;
mod deploy;
mod detached;
mod door;
mod drivers;
mod escapes;
mod first_run;
mod formation;
mod formation_served;
mod hoard;
mod hooks;
mod hygiene;
mod idle;
mod input;
mod kit;
mod limits;
mod loop_artifact;
mod loop_peers;
mod loops;
mod mcp_door;
mod mcp_http;
mod mcp_stdio;
mod oci;
mod oci_hostile;
mod oci_serve;
mod oci_upstream;
mod otel;
mod otel_failures;
mod otel_sdk;
mod otel_serve;
mod peer_lanes;
mod peer_remote;
mod phoenix_harness;
mod process;
mod queue_crash;
mod quota_during_call;
mod quota_shell;
mod registry;
mod run;
mod scripted;
mod serve;
mod spend;
mod stream;
// The seed's stream tests again, against a capsule hosted by `mur serve` (the module
// name picks the host, see `common::host`).
#[path = "stream.rs"]
#[expect(
    clippy::duplicate_mod,
    reason = "the same tests, compiled for the other host"
)]
mod stream_served;
mod trace_calls;
mod trace_cmd;
mod trace_schema;
mod upstream;
mod upstream_capsule;
mod watch;
// `mur watch` and `mur stop` again, against capsules hosted by `mur serve`.
#[path = "watch.rs"]
#[expect(
    clippy::duplicate_mod,
    reason = "the same tests, compiled for the other host"
)]
mod watch_served;
mod webview;
mod webview_formation;

/// The test that exercises each guest component of the workspace. `for_each_guest!`
/// names every guest `host/build.rs` found among the members, so a guest added without
/// a line here fails to compile.
mod guest_tests {
    pub(crate) use crate::check::the_broken_loop_fails_on_max_turns as mur_broken_loop;
    pub(crate) use crate::check::the_broken_tool_fails_on_its_trap as mur_broken_tool;
    pub(crate) use crate::check_driver_hook::a_driver_that_traps_on_a_provider_error_fails_the_check as mur_broken_driver;
    pub(crate) use crate::check_driver_hook::a_hook_that_overruns_its_deadline_fails_the_check as mur_broken_hook;
    pub(crate) use crate::components::a_driver_artifact_replaces_the_builtin_driver as mur_driver_scripted;
    pub(crate) use crate::components::a_tool_component_result_is_fenced_with_its_name as mur_tool_wordcount;
    pub(crate) use crate::components::a_tool_sees_the_workdir_and_nothing_else as mur_tool_probe;
    pub(crate) use crate::containment::the_trace_and_other_sessions_are_out_of_sight as mur_tool_hostile_fs;
    pub(crate) use crate::deadlines::a_loop_sleeping_in_run_is_stopped_at_its_task_deadline as mur_loop_hostile;
    pub(crate) use crate::deadlines::a_sleeping_driver_is_stopped_at_its_deadline as mur_driver_probe;
    pub(crate) use crate::drivers::openai_json_answer_request_shape_and_usage as mur_driver_openai;
    pub(crate) use crate::drivers::streamed_text_becomes_text_frames::anthropic as mur_driver_anthropic;
    pub(crate) use crate::escapes::a_hook_failing_with_megabytes_leaves_a_capped_escaped_log as mur_hook_hostile;
    pub(crate) use crate::hoard::a_chain_of_huge_answers_ends_at_the_records_budget as mur_loop_hoard;
    pub(crate) use crate::hooks::deny_list_default_rules_refuse_curl as mur_hook_deny_list;
    pub(crate) use crate::hooks::every_binding_fires_once_per_point_in_the_seed_diagram_order as mur_hook_recorder;
    pub(crate) use crate::hooks::gatekeeper_reopens_until_required_phrases_are_present as mur_hook_gatekeeper;
    pub(crate) use crate::hooks::memory_carries_a_task_into_the_next_session as mur_hook_memory;
    pub(crate) use crate::hygiene::a_tools_stderr_goes_escaped_to_its_log_and_never_raw_to_murs_stderr as mur_tool_stderr;
    pub(crate) use crate::input::an_answered_wait_resumes_the_task_with_the_reply as mur_tool_ask;
    pub(crate) use crate::limits::a_big_driver_reply_fails_the_task_naming_the_limit as mur_driver_flood;
    pub(crate) use crate::limits::a_big_tool_result_is_refused_and_the_model_gets_the_error as mur_tool_flood;
    pub(crate) use crate::limits::a_call_flooding_loop_is_stopped_by_the_trace_ceiling as mur_loop_flood;
    pub(crate) use crate::loop_peers::a_gathering_loop_asks_every_peer_at_once_and_answers_with_each as mur_loop_gather;
    pub(crate) use crate::loops::outside_a_task_every_call_is_refused_naming_it as mur_loop_probe;
    pub(crate) use crate::loops::the_critics_threaded_history_is_its_main_conversation as mur_loop_critic;
    pub(crate) use crate::loops::the_planner_streams_its_plan_executes_it_and_answers_from_its_check as mur_loop_planner;
    pub(crate) use crate::process::claude::a_task_in_two_turns_calls_a_capsule_tool_through_the_bridge as mur_driver_claude_code;
    pub(crate) use crate::process::codex::a_task_in_two_turns_calls_a_capsule_tool_through_the_bridge as mur_driver_codex;
    pub(crate) use crate::run::a_loop_built_against_another_version_is_refused as mur_loop_future;
    pub(crate) use crate::run::a_loop_built_against_the_released_0_1_0_is_refused as mur_loop_legacy;
    pub(crate) use crate::run::hello_example_prints_its_answer_and_exits_zero as mur_session_loop;
    pub(crate) use crate::run::loop_swap_runs_the_other_loop as mur_loop_oneshot;
    pub(crate) use crate::upstream::a_hostile_upstream_tool_is_contained_as_ours_are as mur_tool_upstream_hostile;
    pub(crate) use crate::upstream::a_tool_of_the_retired_0_1_0_world_gets_its_version_error as mur_tool_legacy;
    pub(crate) use crate::upstream::an_upstream_hook_hears_every_binding_with_its_record_filled as mur_hook_upstream_script;
}

macro_rules! has_a_test {
    ($guest:ident) => {
        const _: fn() = guest_tests::$guest;
    };
}

for_each_guest!(has_a_test);
