//! Keeping a command's processes together and stopping them: its cgroup (where the host may
//! create one), the process tree below its spawn helper, what `/proc` says about processes,
//! pidfds, and signal names.

pub(crate) mod cgroup;
pub(crate) mod pidfd;
pub(crate) mod process;
pub(crate) mod procfs;
pub(crate) mod signal;
