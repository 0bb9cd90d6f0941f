// Our exported `dlsym`, as an assembly trampoline so that every lookup we do not substitute is
// forwarded to glibc's dlsym as a true tail call (jmp): the return address on the stack stays the
// caller's, so RTLD_NEXT still means "after the caller" and RTLD_DEFAULT still searches the
// caller's scope. A C++ forwarder cannot promise this with GCC 12 (no musttail); a normal call
// makes the shim the caller and a library's RTLD_NEXT lookup resolves to itself (HAMi #2903,
// docs/interposition.md, "dlsym rules"). tests/shim checks both cases.
//
//   void* dlsym(void* handle, const char* name):
//     r = vt_dlsym_decide(handle, name)    // our wrapper, or 0 = "forward"
//     if r: return r
//     tail-jump to vt_dlsym_next(handle, name)
#if defined(__x86_64__)
        .text
        .globl  dlsym
        .type   dlsym, @function
dlsym:
        .cfi_startproc
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp                // 16-byte stack alignment for the call
        .cfi_adjust_cfa_offset 8
        call    vt_dlsym_decide
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jz      1f
        ret
1:
        movq    vt_dlsym_next(%rip), %rax
        jmp     *%rax
        .cfi_endproc
        .size   dlsym, .-dlsym
#elif defined(__aarch64__)
        .text
        .globl  dlsym
        .type   dlsym, %function
dlsym:
        stp     x29, x30, [sp, #-32]!
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        bl      vt_dlsym_decide
        mov     x9, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #32
        cbz     x9, 1f
        mov     x0, x9
        ret
1:
        adrp    x9, vt_dlsym_next
        ldr     x9, [x9, #:lo12:vt_dlsym_next]
        br      x9
        .size   dlsym, .-dlsym
#else
#error "dlsym trampoline: add this architecture"
#endif
        .section .note.GNU-stack,"",@progbits
