//! The spawn helper as a program of its own, for hosts that do not call
//! `dsh_executor::helper::dispatch()` themselves. Started by the executor only.

fn main() {
    dsh_executor::helper::dispatch();
    eprintln!("dsh-spawn-helper: internal helper of the dsh executor; not meant to be run by hand");
    std::process::exit(2);
}
