#!/usr/bin/env python
"""Django's command-line utility for ToolOps."""
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
    from toolops.settings_table import exit_if_invalid

    exit_if_invalid(os.environ, "manage.py")  # a bad variable: its name, not a traceback (issue 31)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
