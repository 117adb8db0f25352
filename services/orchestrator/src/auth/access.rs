//! Which credential each orchestrator method takes. One table: a method that is
//! not listed needs an admin key.

use chorus_auth::{Access, Role};

/// What the method at gRPC `path` takes.
pub fn access(path: &str) -> Access {
    listed(path).unwrap_or(Access::role(Role::Admin))
}

/// The table itself; None for a path it does not list.
fn listed(path: &str) -> Option<Access> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    match service {
        "grpc.health.v1.Health"
        | "grpc.reflection.v1.ServerReflection"
        | "grpc.reflection.v1alpha.ServerReflection" => Some(Access::OPEN),
        "chorus.orchestrator.v1.Orchestrator" => orchestrator(method),
        "chorus.orchestrator.v1.AgentTools" => agent_tools(method),
        "lf.a2a.v1.A2AService" => a2a(method),
        _ => None,
    }
}

fn orchestrator(method: &str) -> Option<Access> {
    Some(match method {
        "CreateWorkspace" | "UpdateWorkspace" | "DeleteWorkspace" | "CreateProvider"
        | "UpdateProvider" | "DeleteProvider" | "CreateAgent" | "UpdateAgent" | "DeleteAgent"
        | "OpenRun" | "FinishRun" | "DeleteTask" | "CreateApiKey" | "ListApiKeys"
        | "RevokeApiKey" | "RotateRunTokenKey" => Access::role(Role::Admin),
        "CreateTask" | "UpdateTaskStatus" | "UpdatePlanning" | "PlanTask" | "SubmitAnswers"
        | "StartTask" | "CancelTask" | "UpdateTaskBudget" | "LandTask" | "DiscardTask"
        | "AnswerApproval" => Access::role(Role::Operator),
        // An agent hands off with its own run token; people need an operator key.
        "Handoff" => Access::run_or(Role::Operator),
        "GetWorkspace" | "ListWorkspaces" | "GetProvider" | "ListProviders" | "GetAgent"
        | "ListAgents" | "GetTask" | "ListTasks" | "GetHistory" | "WatchTask" | "WatchTasks"
        | "GetRun" | "ListRuns" | "GetUsage" | "GetStatus" | "GetTaskChange" => {
            Access::role(Role::Viewer)
        }
        _ => return None,
    })
}

/// The A2A face: an operator sends and cancels, a viewer reads.
fn a2a(method: &str) -> Option<Access> {
    Some(match method {
        "SendMessage"
        | "SendStreamingMessage"
        | "CancelTask"
        | "CreateTaskPushNotificationConfig"
        | "DeleteTaskPushNotificationConfig" => Access::role(Role::Operator),
        "GetTask"
        | "ListTasks"
        | "SubscribeToTask"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "GetExtendedAgentCard" => Access::role(Role::Viewer),
        _ => return None,
    })
}

fn agent_tools(method: &str) -> Option<Access> {
    Some(match method {
        "CallTool" => Access::run(),
        "AuthorizeToolCall" | "RecordToolCall" | "GetRunTokenKeys" | "AuthenticateKey" => {
            Access::role(Role::ToolExec)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn every_method_the_orchestrator_serves_has_its_own_rule() {
        let set = prost_types::FileDescriptorSet::decode(chorus_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptor set");
        let mut seen = 0;
        for file in &set.file {
            if !["chorus.orchestrator.v1", "lf.a2a.v1"].contains(&file.package()) {
                continue;
            }
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    assert!(listed(&path).is_some(), "{path} has no access rule");
                    seen += 1;
                }
            }
        }
        assert!(seen > 40, "only {seen} methods found");
    }

    #[test]
    fn what_is_not_listed_needs_an_admin_key_and_health_is_open() {
        assert_eq!(
            access("/chorus.orchestrator.v1.Orchestrator/Nope"),
            Access::role(Role::Admin)
        );
        assert_eq!(access("/x.Y/Z"), Access::role(Role::Admin));
        assert_eq!(access("/grpc.health.v1.Health/Check"), Access::OPEN);
        assert_eq!(
            access("/chorus.orchestrator.v1.AgentTools/CallTool"),
            Access::run()
        );
    }
}
