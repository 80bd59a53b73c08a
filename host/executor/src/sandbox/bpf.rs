//! A small assembler for classic BPF seccomp programs: forward jumps to labels, and a dispatch
//! on the call's number that is a binary search rather than a chain of comparisons.
//!
//! Why not a chain: when a filter is installed, the kernel runs it once for every call number of
//! every architecture (about 900 runs) to find the calls it always allows, which it then never
//! runs the filter for. Each run walks the chain up to its call, so a chain of n comparisons
//! costs about 900 × n steps at every command's start: 60 comparisons took 119 µs to install
//! here, the same 60 behind one range check 18 µs (`seccomp(SET_MODE_FILTER)` in a fresh child,
//! 200 runs each). A binary search keeps every run to a few steps.

use std::fmt;

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u16,
    pub(crate) jt: u8,
    pub(crate) jf: u8,
    pub(crate) k: u32,
}

/// A finished program.
pub(crate) type Program = Vec<Insn>;

/// A place in the program, known before it is reached (jumps only go forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label(usize);

/// Where a conditional jump goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum To {
    /// The next instruction.
    Next,
    Label(Label),
}

impl From<Label> for To {
    fn from(label: Label) -> To {
        To::Label(label)
    }
}

/// A program that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AsmError(String);

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seccomp filter: {}", self.0)
    }
}

impl std::error::Error for AsmError {}

/// `offsetof(struct seccomp_data, nr)`.
const NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args)`.
const ARGS: u32 = 16;

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// An instruction whose jumps are still labels.
#[derive(Debug)]
struct Pending {
    code: u16,
    k: u32,
    jt: To,
    jf: To,
    /// `JA`'s target (its offset goes in `k`).
    always: Option<Label>,
}

/// A program being written.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    insns: Vec<Pending>,
    /// Where each label was placed.
    places: Vec<Option<usize>>,
}

impl Assembler {
    pub(crate) fn new() -> Assembler {
        Assembler::default()
    }

    /// A label to place later.
    pub(crate) fn label(&mut self) -> Label {
        self.places.push(None);
        Label(self.places.len() - 1)
    }

    /// Places `label` at the next instruction.
    pub(crate) fn place(&mut self, label: Label) {
        debug_assert!(
            self.places[label.0].is_none(),
            "label {} placed twice",
            label.0
        );
        self.places[label.0] = Some(self.insns.len());
    }

    fn push(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.insns.push(Pending {
            code,
            k,
            jt,
            jf,
            always: None,
        });
    }

    /// Loads the call's number.
    pub(crate) fn load_nr(&mut self) {
        self.push(LD_ABS, NR, To::Next, To::Next);
    }

    /// Loads the call's architecture.
    pub(crate) fn load_arch(&mut self) {
        self.push(LD_ABS, ARCH, To::Next, To::Next);
    }

    /// Loads the low 32 bits of argument `index` (what the kernel reads of an `int`).
    pub(crate) fn load_arg_low(&mut self, index: u32) {
        // The low half first: both architectures this builds for are little-endian.
        const _: () = assert!(cfg!(target_endian = "little"));
        self.push(LD_ABS, ARGS + 8 * index, To::Next, To::Next);
    }

    /// `A &= k`.
    pub(crate) fn and(&mut self, k: u32) {
        self.push(AND_K, k, To::Next, To::Next);
    }

    /// To `jt` if `A == k`, else to `jf`.
    pub(crate) fn jeq(&mut self, k: u32, jt: impl Into<To>, jf: impl Into<To>) {
        self.push(JEQ_K, k, jt.into(), jf.into());
    }

    /// To `jt` if `A >= k`, else to `jf`.
    pub(crate) fn jge(&mut self, k: u32, jt: impl Into<To>, jf: impl Into<To>) {
        self.push(JGE_K, k, jt.into(), jf.into());
    }

    /// To `jt` if `A & k != 0`, else to `jf`.
    pub(crate) fn jset(&mut self, k: u32, jt: impl Into<To>, jf: impl Into<To>) {
        self.push(JSET_K, k, jt.into(), jf.into());
    }

    /// Always to `to`.
    pub(crate) fn jump(&mut self, to: Label) {
        self.insns.push(Pending {
            code: JA,
            k: 0,
            jt: To::Next,
            jf: To::Next,
            always: Some(to),
        });
    }

    /// Returns `action`.
    pub(crate) fn ret(&mut self, action: u32) {
        self.push(RET_K, action, To::Next, To::Next);
    }

    /// With the call's number loaded: to the label of its case, or to `otherwise`. `cases` need
    /// not be sorted; a number named twice is an error.
    pub(crate) fn dispatch(
        &mut self,
        cases: &[(u32, Label)],
        otherwise: Label,
    ) -> Result<(), AsmError> {
        let mut sorted = cases.to_vec();
        sorted.sort_by_key(|&(nr, _)| nr);
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(AsmError(format!("call {} has two cases", pair[0].0)));
        }
        self.search(&sorted, otherwise);
        Ok(())
    }

    /// A few comparisons where that is shorter than another split.
    const LEAF: usize = 4;

    fn search(&mut self, cases: &[(u32, Label)], otherwise: Label) {
        if cases.len() <= Self::LEAF {
            for &(nr, label) in cases {
                self.jeq(nr, label, To::Next);
            }
            self.jump(otherwise);
            return;
        }
        let (low, high) = cases.split_at(cases.len() / 2);
        let upper = self.label();
        self.jge(high[0].0, upper, To::Next);
        self.search(low, otherwise);
        self.place(upper);
        self.search(high, otherwise);
    }

    /// The program, every label resolved; an error where a label was never placed, is behind
    /// its jump, or is further than a conditional jump reaches (255 instructions).
    pub(crate) fn finish(self) -> Result<Program, AsmError> {
        let place = |label: Label| {
            self.places[label.0].ok_or_else(|| AsmError(format!("label {} not placed", label.0)))
        };
        let offset = |at: usize, to: To| -> Result<usize, AsmError> {
            let target = match to {
                To::Next => at + 1,
                To::Label(label) => place(label)?,
            };
            target
                .checked_sub(at + 1)
                .ok_or_else(|| AsmError(format!("a jump backwards at {at}")))
        };
        let len = self.insns.len();
        if len == 0 || len > usize::from(u16::MAX) {
            return Err(AsmError(format!("{len} instructions")));
        }
        let mut program = Vec::with_capacity(len);
        for (at, insn) in self.insns.iter().enumerate() {
            let short = |to: To| -> Result<u8, AsmError> {
                u8::try_from(offset(at, to)?)
                    .map_err(|_| AsmError(format!("a jump too far at {at}")))
            };
            let (jt, jf, k) = match insn.always {
                Some(label) => (0, 0, offset(at, To::Label(label))? as u32),
                None => (short(insn.jt)?, short(insn.jf)?, insn.k),
            };
            // Every path must end in a return: nothing may run off the end.
            let furthest = match insn.code {
                RET_K => at,
                JA => at + 1 + k as usize,
                _ => at + 1 + usize::from(jt.max(jf)),
            };
            if furthest >= len {
                return Err(AsmError(format!("running off the end at {at}")));
            }
            program.push(Insn {
                code: insn.code,
                jt,
                jf,
                k,
            });
        }
        Ok(program)
    }
}

/// Runs `program` as the kernel runs a seccomp filter (only the instructions [`Assembler`]
/// writes, and those of `seccompiler`'s programs) on a call; returns the action and the
/// number of instructions run.
#[cfg(test)]
pub(crate) fn run(program: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize) {
    let mut data = [0u32; 16];
    data[0] = nr;
    data[1] = arch;
    for (i, arg) in args.iter().enumerate() {
        data[4 + 2 * i] = *arg as u32;
        data[5 + 2 * i] = (*arg >> 32) as u32;
    }
    let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let insn = &program[pc];
        steps += 1;
        let jump = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
        pc = match u32::from(insn.code) {
            c if c == u32::from(LD_ABS) => {
                a = data[insn.k as usize / 4];
                pc + 1
            }
            c if c == u32::from(JA) => pc + 1 + insn.k as usize,
            c if c == u32::from(JEQ_K) => jump(a == insn.k),
            c if c == u32::from(JGE_K) => jump(a >= insn.k),
            c if c == libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K => jump(a > insn.k),
            c if c == u32::from(JSET_K) => jump(a & insn.k != 0),
            c if c == u32::from(AND_K) => {
                a &= insn.k;
                pc + 1
            }
            c if c == u32::from(RET_K) => return (insn.k, steps),
            c => panic!("an instruction this test does not run: {c:#x}"),
        };
    }
}

/// What the kernel finds when it installs `program` (`seccomp_is_const_allow`): whether call
/// `nr` of `arch` is always allowed, found without reading its arguments, and in how many steps.
#[cfg(test)]
pub(crate) fn const_allow(program: &[Insn], arch: u32, nr: u32) -> (bool, usize) {
    let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let insn = &program[pc];
        steps += 1;
        let jump = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
        pc = match insn.code {
            LD_ABS if insn.k == NR => {
                a = nr;
                pc + 1
            }
            LD_ABS if insn.k == ARCH => {
                a = arch;
                pc + 1
            }
            // An argument: not constant.
            LD_ABS => return (false, steps),
            JA => pc + 1 + insn.k as usize,
            JEQ_K => jump(a == insn.k),
            JGE_K => jump(a >= insn.k),
            JSET_K => jump(a & insn.k != 0),
            AND_K => {
                a &= insn.k;
                pc + 1
            }
            RET_K => return (insn.k == libc::SECCOMP_RET_ALLOW, steps),
            _ => return (false, steps),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const DENY: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    /// A dispatch over `numbers`, each to a return of its own number.
    fn dispatcher(numbers: &[u32]) -> Program {
        let mut asm = Assembler::new();
        let cases: Vec<(u32, Label)> = numbers.iter().map(|&nr| (nr, asm.label())).collect();
        let otherwise = asm.label();
        asm.load_nr();
        asm.dispatch(&cases, otherwise).unwrap();
        for &(nr, label) in &cases {
            asm.place(label);
            asm.ret(libc::SECCOMP_RET_ERRNO | nr);
        }
        asm.place(otherwise);
        asm.ret(ALLOW);
        asm.finish().unwrap()
    }

    #[test]
    fn a_dispatch_finds_every_case_and_nothing_else() {
        for count in [0usize, 1, 4, 5, 9, 40, 100] {
            let numbers: Vec<u32> = (0..count as u32).map(|i| i * 7 + 3).collect();
            let program = dispatcher(&numbers);
            for nr in 0..800 {
                let expected = if numbers.contains(&nr) {
                    libc::SECCOMP_RET_ERRNO | nr
                } else {
                    ALLOW
                };
                assert_eq!(
                    run(&program, 0, nr, [0; 6]).0,
                    expected,
                    "{count} cases, {nr}"
                );
            }
        }
    }

    #[test]
    fn a_dispatch_takes_few_steps() {
        let numbers: Vec<u32> = (0..100).map(|i| i * 3).collect();
        let program = dispatcher(&numbers);
        let most = (0..1000)
            .map(|nr| const_allow(&program, 0, nr).1)
            .max()
            .unwrap();
        // Seven halvings of 100, four comparisons, a jump, a return, the load.
        assert!(most <= 14, "{most} steps");
    }

    #[test]
    fn bad_programs_are_errors() {
        // A label never placed.
        let mut asm = Assembler::new();
        let nowhere = asm.label();
        asm.load_nr();
        asm.jeq(1, nowhere, To::Next);
        asm.ret(ALLOW);
        assert!(asm.finish().is_err());
        // A jump backwards.
        let mut asm = Assembler::new();
        let back = asm.label();
        asm.place(back);
        asm.load_nr();
        asm.jeq(1, back, To::Next);
        asm.ret(ALLOW);
        assert!(asm.finish().is_err());
        // Too far for a conditional jump.
        let mut asm = Assembler::new();
        let far = asm.label();
        asm.load_nr();
        asm.jeq(1, far, To::Next);
        for _ in 0..300 {
            asm.ret(ALLOW);
        }
        asm.place(far);
        asm.ret(DENY);
        assert!(asm.finish().is_err());
        // Running off the end.
        let mut asm = Assembler::new();
        asm.load_nr();
        asm.jeq(1, To::Next, To::Next);
        assert!(asm.finish().is_err());
        // Two cases for one call.
        let mut asm = Assembler::new();
        let (a, b, otherwise) = (asm.label(), asm.label(), asm.label());
        assert!(asm.dispatch(&[(5, a), (5, b)], otherwise).is_err());
    }
}
