use serde_json::json;

use crate::arena::*;

// ---- file.list and file.search ------------------------------------------------------

#[tokio::test]
async fn list_refuses_paths_outside_and_escaping_symlinks() {
    let a = Arena::new();
    for path in [
        a.abs("outside"),
        "../outside".to_owned(),
        "/".to_owned(),
        "ln_dir_abs".to_owned(),
        "ln_dir_rel".to_owned(),
        "deep/a/b/ln_up".to_owned(),
        "ln_dir_rel/nested".to_owned(),
    ] {
        a.list_or_search("file.list", json!({ "path": path }), false)
            .await;
        a.list_or_search(
            "file.list",
            json!({ "path": path, "recursive": true, "include_ignored": true }),
            false,
        )
        .await;
    }
}

#[tokio::test]
async fn list_of_the_root_never_shows_what_is_behind_escaping_symlinks() {
    let a = Arena::new();
    for args in [
        json!({}),
        json!({ "recursive": true, "include_ignored": true }),
        json!({ "pattern": "**/*.txt", "include_ignored": true }),
        json!({ "path": "deep", "recursive": true }),
    ] {
        a.list_or_search("file.list", args, true).await;
    }
}

#[tokio::test]
async fn search_refuses_paths_outside_and_escaping_symlinks() {
    let a = Arena::new();
    for path in [
        a.abs("outside"),
        a.abs("outside/outside-secret.txt"),
        "../outside".to_owned(),
        "ln_secret_abs".to_owned(),
        "ln_secret_rel".to_owned(),
        "ln_dir_abs".to_owned(),
        "ln_dir_rel/nested".to_owned(),
        "deep/a/b/ln_up".to_owned(),
    ] {
        a.list_or_search(
            "file.search",
            json!({ "pattern": "TOP[S]ECRET", "path": path, "include_ignored": true }),
            false,
        )
        .await;
    }
}

#[tokio::test]
async fn search_of_the_root_never_shows_what_is_behind_escaping_symlinks() {
    let a = Arena::new();
    for args in [
        json!({ "pattern": "TOP[S]ECRET" }),
        json!({ "pattern": "TOP[S]ECRET", "include_ignored": true, "context_lines": 2 }),
        json!({ "pattern": ".", "glob": "**/*.txt", "include_ignored": true }),
        json!({ "pattern": "TOPSECRE", "fixed_strings": true, "path": "deep" }),
    ] {
        a.list_or_search("file.search", args, true).await;
    }
}
