//! Commands over their lifetime: the background task table, one command's course from start to
//! end, and the hand-over of a foreground command to the background.

pub(crate) mod handoff;
pub(crate) mod lifecycle;
pub(crate) mod table;
