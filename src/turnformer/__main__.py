"""``turnformer`` and ``python -m turnformer``: the command line (`turnformer.cli`), whose modules take a moment to
import: a Ctrl-C in that moment ends it as one in a command does (exit 130, one line), not with a traceback."""

import sys


def main() -> None:
    try:
        from turnformer.cli import main as command_line  # inside the guard: a Ctrl-C while it loads is caught
    except KeyboardInterrupt:
        sys.stderr.write("interrupted (Ctrl-C)\n")
        sys.exit(130)
    command_line()


if __name__ == "__main__":
    main()
