//! A tools component that misbehaves on request, for the host's fault-isolation and deny tests.
//!
//! `call-tool` with name `trap`, `loop`, `alloc`, `read-file`, `connect` or `env` does exactly
//! that; `ok` answers `ok`. Built only for `wasm32`; natively the crate is empty.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "tools-component",
    });

    use exports::dsh::bash::tools as wit_tools;

    struct Faulty;

    fn text(text: String) -> wit_tools::ToolResult {
        wit_tools::ToolResult {
            text,
            is_error: false,
            error_code: None,
        }
    }

    impl wit_tools::Guest for Faulty {
        fn list_tools() -> Vec<wit_tools::ToolDefinition> {
            ["ok", "trap", "loop", "alloc", "read-file", "connect", "env"]
                .into_iter()
                .map(|name| wit_tools::ToolDefinition {
                    name: name.into(),
                    description: format!("misbehave: {name}"),
                    input_schema: r#"{"type":"object","properties":{}}"#.into(),
                })
                .collect()
        }

        fn call_tool(
            name: String,
            arguments: String,
            _caller: wit_tools::Caller,
        ) -> wit_tools::ToolResult {
            match name.as_str() {
                "trap" => core::arch::wasm32::unreachable(),
                "loop" => {
                    let mut n: u64 = arguments.len() as u64;
                    loop {
                        n = std::hint::black_box(n.wrapping_mul(31).wrapping_add(7));
                    }
                }
                "alloc" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                    }
                }
                "read-file" => text(match std::fs::read_to_string("/etc/passwd") {
                    Ok(data) => format!("read {} bytes", data.len()),
                    Err(e) => format!("error: {e}"),
                }),
                "connect" => text(match std::net::TcpStream::connect("127.0.0.1:22") {
                    Ok(_) => "connected".into(),
                    Err(e) => format!("error: {e}"),
                }),
                "env" => text(format!(
                    "{} variables, {} arguments",
                    std::env::vars().count(),
                    std::env::args().count()
                )),
                _ => text("ok".into()),
            }
        }

        fn task_done(_task: wit_tools::Task) -> Result<(), String> {
            Ok(())
        }
    }

    export!(Faulty);
}
