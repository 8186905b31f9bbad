"""Roost's benchmark suite: ``python -m bench [--quick] [--reps N] [--only a,b] [--out bench/RESULTS.md]``.

Absolute times mean little on a shared 2-core machine, so every figure is either a ratio against a
ceiling measured in the same run (paired per repetition, then min/median/max over repetitions) or a
scale figure (memory, counts). Servers and load clients are separate processes on 127.0.0.1; every loop
stops at a fixed count or after a fixed time.

Modules, one concern each:

- :mod:`bench.settings` full and quick parameters; :mod:`bench.stats` percentiles and summaries;
  :mod:`bench.procs` child processes (started and stopped by PID), ports, ``/proc`` readings;
- :mod:`bench.wsclient` a lean RFC 6455 client (asyncio protocol, pre-masked frames);
  :mod:`bench.loadgen` the load-client process (request/response, fan-out, hold idle);
- :mod:`bench.echo_servers` the ceilings: raw ``websockets`` echo and Starlette-on-uvicorn echo;
- sections: :mod:`bench.sqlite_ceiling`, :mod:`bench.rpc`, :mod:`bench.fanout`,
  :mod:`bench.activation` (with :mod:`bench.dataset` and the in-process :mod:`bench.activation_worker`),
  :mod:`bench.memory`;
- :mod:`bench.machine` machine info, :mod:`bench.report` RESULTS.md and the targets table.
"""
