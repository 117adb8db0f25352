//! The tables, as diesel sees them. Written by hand to match both migration sets
//! (`migrations/sqlite`, `migrations/postgres`): only TEXT and BIGINT columns, so
//! one description serves both backends.

diesel::table! {
    workspaces (id) {
        id -> Text,
        name -> Text,
        root -> Text,
        system_provider -> Nullable<Text>,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        /// JSON of `WorkspaceLimits`.
        limits -> Nullable<Text>,
        /// JSON of `WorkspaceChanges`; NULL: the defaults.
        changes -> Nullable<Text>,
        /// JSON array of `approval::Rule`: every agent's, after its own.
        approval_rules -> Nullable<Text>,
    }
}

diesel::table! {
    providers (workspace_id, name) {
        workspace_id -> Text,
        name -> Text,
        kind -> Text,
        base_url -> Nullable<Text>,
        model -> Nullable<Text>,
        /// `enc:v1:<base64>` (sealed for its row), `env:NAME` or `file:/path`
        /// (references); `plain:<key>` only until the first start seals it.
        api_key -> Nullable<Text>,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        /// `mcp` or `shell` ([`crate::domain::ToolTransport`]).
        tool_transport -> Text,
    }
}

diesel::table! {
    agents (workspace_id, name) {
        workspace_id -> Text,
        name -> Text,
        kind -> Text,
        instructions -> Text,
        /// JSON array of strings.
        allowed_tools -> Text,
        provider -> Nullable<Text>,
        model -> Nullable<Text>,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        /// JSON array of `host:port` rules.
        egress -> Text,
        /// JSON of `Budget`: the default of a task started with it.
        budget -> Nullable<Text>,
        /// JSON array of `approval::Rule`.
        approval_rules -> Nullable<Text>,
    }
}

diesel::table! {
    tasks (id) {
        id -> Text,
        workspace_id -> Text,
        description -> Text,
        /// JSON of `TaskSource`.
        source -> Text,
        status -> Text,
        status_reason -> Nullable<Text>,
        stage -> Text,
        /// JSON of `Planning`.
        planning -> Text,
        current_agent -> Nullable<Text>,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        last_sequence -> BigInt,
        /// `traceparent` of the task's trace.
        trace_context -> Nullable<Text>,
        /// JSON of `Usage`: the model calls of all its runs.
        usage -> Nullable<Text>,
        /// JSON of `TaskBudget`.
        budget -> Nullable<Text>,
        /// The source's conversation id (an A2A context), to find tasks by.
        conversation_id -> Nullable<Text>,
        /// JSON of `AutoStart`.
        auto_start -> Nullable<Text>,
        /// `TaskSource::request_key`: one task per workspace for each.
        request_key -> Nullable<Text>,
        /// JSON of `BranchColumn`: its own branch, or why it has none.
        branch -> Nullable<Text>,
        /// JSON of `approval::Approvals`.
        approvals -> Nullable<Text>,
    }
}

diesel::table! {
    task_events (task_id, sequence) {
        task_id -> Text,
        sequence -> BigInt,
        kind -> Text,
        /// JSON value.
        data -> Text,
        at_ms -> BigInt,
    }
}

diesel::table! {
    runs (id) {
        id -> Text,
        task_id -> Text,
        agent -> Text,
        parent_run_id -> Nullable<Text>,
        state -> Text,
        /// JSON array of strings.
        tools -> Text,
        started_ms -> BigInt,
        finished_ms -> Nullable<BigInt>,
        end_reason -> Nullable<Text>,
        /// JSON of `CompletionReport`.
        completion_report -> Nullable<Text>,
        /// JSON of `PlannerOutput`.
        planner_output -> Nullable<Text>,
        session_id -> Nullable<Text>,
        /// JSON of `Usage`.
        usage -> Nullable<Text>,
        handoff_index -> Nullable<BigInt>,
        prompt -> Nullable<Text>,
        output -> Nullable<Text>,
        token_root -> Nullable<Text>,
        token_expires_ms -> Nullable<BigInt>,
        token_egress -> Nullable<Text>,
        /// The replica driving the run, while one does.
        replica -> Nullable<Text>,
        /// Until when the replica's lease holds (its heartbeat extends it).
        lease_expires_ms -> Nullable<BigInt>,
        /// Bumped each time the run is taken over.
        epoch -> BigInt,
        timeout_ms -> Nullable<BigInt>,
        /// JSON of `approval::RunRules`.
        rules -> Nullable<Text>,
    }
}

diesel::table! {
    replicas (id) {
        id -> Text,
        /// The process holding the replica id now.
        instance -> Text,
        started_ms -> BigInt,
        heartbeat_ms -> BigInt,
        lease_expires_ms -> BigInt,
        stopped_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    run_token_keys (kid) {
        kid -> Text,
        /// Sealed with the secrets key.
        private_key -> Text,
        created_ms -> BigInt,
        retired_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Text,
        name -> Text,
        role -> Text,
        /// `sha256:<hex>` of the whole key.
        hash -> Text,
        created_ms -> BigInt,
        revoked_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    run_messages (run_id, sequence) {
        run_id -> Text,
        sequence -> BigInt,
        /// JSON of one chat message.
        body -> Text,
    }
}

diesel::table! {
    /// Calls that may have processes running: authorized, not yet recorded.
    calls_in_flight (id) {
        id -> Text,
        run_id -> Text,
        started_ms -> BigInt,
    }
}

diesel::table! {
    /// Changes of every task in commit order (see the migration).
    task_feed (position) {
        position -> BigInt,
        task_id -> Text,
        workspace_id -> Text,
        sequence -> BigInt,
        kind -> Text,
    }
}

diesel::table! {
    /// The last position given out in `task_feed` (one row).
    task_feed_head (id) {
        id -> Integer,
        position -> BigInt,
    }
}

diesel::table! {
    /// Every model call of every run (see the migration).
    model_calls (id) {
        id -> BigInt,
        at_ms -> BigInt,
        workspace_id -> Text,
        task_id -> Text,
        run_id -> Text,
        agent -> Text,
        provider -> Text,
        model -> Text,
        input_tokens -> BigInt,
        output_tokens -> BigInt,
        cache_read_tokens -> BigInt,
        cache_write_tokens -> BigInt,
        cost_pico_usd -> Nullable<BigInt>,
        cost_source -> Text,
        calls -> BigInt,
        unpriced_calls -> BigInt,
        /// 1: the call's tokens are an estimate.
        estimated -> BigInt,
        /// 0: sent and not answered (yet).
        answered -> BigInt,
    }
}

diesel::table! {
    /// Model calls summed by workspace, UTC day, agent, provider and model.
    usage_daily (workspace_id, day, agent, provider, model) {
        workspace_id -> Text,
        day -> BigInt,
        agent -> Text,
        provider -> Text,
        model -> Text,
        calls -> BigInt,
        input_tokens -> BigInt,
        output_tokens -> BigInt,
        cache_read_tokens -> BigInt,
        cache_write_tokens -> BigInt,
        cost_pico_usd -> BigInt,
        unpriced_calls -> BigInt,
        estimated_calls -> BigInt,
    }
}

diesel::joinable!(providers -> workspaces (workspace_id));
diesel::joinable!(agents -> workspaces (workspace_id));
diesel::joinable!(tasks -> workspaces (workspace_id));
diesel::table! {
    /// A2A push-notification configs of tasks.
    push_configs (id) {
        id -> Text,
        task_id -> Text,
        url -> Text,
        /// Sealed.
        token -> Text,
        auth_scheme -> Nullable<Text>,
        /// Sealed.
        auth_credentials -> Nullable<Text>,
        created_ms -> BigInt,
        /// Sealed.
        signing_secret -> Nullable<Text>,
    }
}

diesel::table! {
    /// Status changes waiting to be pushed.
    push_outbox (id) {
        id -> BigInt,
        config_id -> Text,
        task_id -> Text,
        sequence -> BigInt,
        attempts -> Integer,
        due_ms -> BigInt,
        last_error -> Nullable<Text>,
    }
}

diesel::joinable!(task_events -> tasks (task_id));
diesel::joinable!(runs -> tasks (task_id));
diesel::joinable!(run_messages -> runs (run_id));

diesel::allow_tables_to_appear_in_same_query!(
    push_configs,
    push_outbox,
    workspaces,
    providers,
    agents,
    tasks,
    task_events,
    runs,
    run_messages,
    api_keys,
    replicas,
    run_token_keys,
    calls_in_flight,
    task_feed,
    task_feed_head,
    model_calls,
    usage_daily
);
