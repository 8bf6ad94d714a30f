from bundlectl.cli import main

raise SystemExit(main())
