from spag.cli import run

# Guarded: a process spawned by multiprocessing (vLLM's engine core under spawn)
# imports this module again and must not run the command a second time.
if __name__ == "__main__":
    run()
