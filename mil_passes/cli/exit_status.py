"""The exit statuses of every command, and how ``--help`` states them."""

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EPILOG = """exit status:
  0    done; no error finding (verify: no pass changed the outputs)
  1    an error finding (optimize: written, an error left; verify: a pass changed the outputs)
  2    nothing done: a bad path, model, option or configuration, in one line on stderr
  3    an internal error of mil-passes: one line on stderr naming the file holding the traceback
  130  interrupted
with several inputs, the worst status of any."""
