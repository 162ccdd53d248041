"""pytest over notebooks/ (make test: nbval) runs the complete series only. The learner copies that
`make exercises` writes (notebooks/exercises/, and the same folder under a translation such as
notebooks/zh-TW/exercises/) hold stubs on purpose; they are not collected."""

collect_ignore_glob = ["exercises/*", "*/exercises/*"]
