from sparkplay.cli import main

main()
