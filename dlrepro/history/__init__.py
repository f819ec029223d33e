"""Many runs, many machines: the results database (db, schema), the same
cells across machines (machines), each cell over time with its steps
(timeline, steps), and their HTML page (page). The top layer of the host:
it reads run folders through dlrepro.bench and draws with dlrepro.present;
nothing imports it but tasks.py."""
