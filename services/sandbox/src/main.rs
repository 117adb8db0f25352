//! `chorus-sandbox`: the launcher every process an agent causes starts through.
//! See the `chorus_sandbox::launcher` module.

fn main() {
    chorus_sandbox::launcher::main()
}
