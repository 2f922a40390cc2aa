from logitlab.cli import main

main(prog_name="logitlab")
