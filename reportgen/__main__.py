from reportgen.cli import entry

entry()
