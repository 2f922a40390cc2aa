from logitlab.cli import main

main()
