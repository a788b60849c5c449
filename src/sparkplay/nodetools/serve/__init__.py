"""sparkplay-serve: what the serve role runs on a node (Python 3 standard library only; the watchdog's
metrics use prometheus_client, from the node's packages).

sparkplay-serve wait-ports ADDR:PORT ... [--timeout S]
    Block until every port accepts a TCP connection (a leader's
    ExecStartPre: workers first). Exit 1 at the timeout.
sparkplay-serve run [--wait-for ADDR:PORT ...] [--bind ADDR ...] [--timeout S] -- ENGINE ARGV
    A rank's ExecStart: wait until every peer's port answers and this node
    holds every address the engine binds (its cable's), then become the
    engine (exec). Each change of what it waits for is one journal line
    ("sparkplay-serve: waiting for ..."); a timeout of 0 waits as long as it
    takes (no start is counted while a peer or the cable is away).
sparkplay-serve explain --unit U [--fabric-env FILE]
    Why a rank is not serving, as one JSON object ({why, waiting, twins,
    memory, restarts}): what it waits for, a twin without carrier, an engine
    frozen, exiting or killed above its memory limit, a unit that gave up.
sparkplay-serve memguard --unit U --max BYTES [--high BYTES] [--container C]
    Beside a unit's start (its ExecStartPre runs it with systemd-run, as
    root, journal tag sparkplay-memguard): the engine held to its memory limit
    (systemd's MemoryMax on cgroup v2; docker update for a container; a v1
    memory cgroup of its own on a hybrid host); notes the kills before it.
sparkplay-serve memguard-release --unit U
    After a stop: the guard's cgroup and state removed.
sparkplay-serve watch --unit U --peer ADDR:PORT ...
    Runs as a unit on the leader. A connection to a worker that the worker
    closed while the leader still holds it (CLOSE_WAIT) means the worker
    went away, its state with it: restart the leader, which then waits
    for the worker again.
sparkplay-serve restart-workers --unit U --peer ADDR ...
    A group engine's leader runs it before it starts (ExecStartPre): every
    worker killed and started anew over the peer ssh trust, in order, since
    a worker of a dead group never rejoins (vLLM's mp back end, SGLang).
    Exit 1 when a worker could not be restarted (systemd retries the leader).
sparkplay-serve drain --state FILE --model NAME --to URL --from URL [--timeout S]
    After the serve role moved a model's route (an added deployment's update
    beside itself): wait until the gateway's state routes it to the new API
    and holds no request on the old one. One JSON object; exit 1 at the
    timeout, naming the requests still in flight.
sparkplay-serve image-send --image IMAGE --peer ADDR [--docker D] [--docker-root DIR] [--whole]
    On rank 0, as root: the engine's image to another rank over the cable,
    only the layers it lacks (each rebuilt from Docker's overlay2 store and
    checked against its diff id), else the whole image with the reason on
    stderr. One JSON object: how, bytes, seconds (and layers sent or held).
sparkplay-serve ready --url URL --model NAME --timeout S --unit U [--peer HOST ...] [--receipt FILE]
    Wait until the API is healthy, lists the model and answers a
    temperature-0 completion, while watching this rank's unit and each
    peer's (over the peer ssh trust): a failed unit stops the wait. Prints
    one JSON object; on failure it holds every rank's last journal lines.
    Only an API served by the unit counts: a port held by another process
    (one that bound it first) is named and never taken for the model.
    Exit 0 ready, 4 a unit failed, 5 timed out, 6 another process holds the port.
sparkplay-serve watchdog --url URL --model NAME --unit U [--worker ADDR ...] [--interval S] [--failures K]
        [--grace S] [--max-restarts R] [--window S] [--metrics-port P] [--container NAME]
    Runs as a unit on the leader. A real completion (a few tokens at
    temperature 0) every interval; K failed probes in a row restart every
    rank in order (stop the leader and the workers, start the workers, then
    the leader, wait for an answer). At most R restarts per window, then it
    stands down and records why (the state file, read by status); a pause
    file stops it acting; a restart of the unit by anyone gives a new grace.
    Counters for Prometheus on METRICS-BIND:METRICS-PORT (prometheus_client).
sparkplay-serve bench --url URL --model NAME --benchy PATH --tokenizer T --corpus FILE|URL --out FILE
        [--pp N ...] [--tg N ...] [--depth N ...] [--concurrency C ...] [--runs R]
    The bench on the leader: first the invariance check (fixed prompts at
    temperature 0 answered alone, then among C concurrent requests for each
    level above 1: the tokens must be identical; a difference names the
    prompt, the level and the first differing position), then llama-benchy
    (prompt processing and generation rates; a local corpus is served to it
    on loopback), then a bare one-token request beside llama-benchy's own
    one-token latency (the client's overhead). Writes one JSON object to
    --out. Exit 0, 1 when llama-benchy failed, 3 when outputs differ.
    Started as root with --as-user, it reads the API's key (--api-key-env)
    first, then drops to that user for everything else; llama-benchy gets
    the key through its environment, never its command line.
sparkplay-serve gateway --routes FILE [--listen ADDR:PORT] [--keys FILE] [--upstream-keys DIR]
        [--swapper SOCKET] [--state FILE] (bounds: see --help)
    One OpenAI-compatible endpoint for every deployment on the leader, on
    aiohttp (run from its virtualenv): a POST /v1/... goes to the deployment
    serving its `model` (streams passed on as they arrive, errors as the
    engine gave them), /v1/models lists every served name, /metrics counts.
    A model served on demand is started (through the swapper) when asked
    for, stopped when idle past its TTL or to make room. The routes file is
    re-read when it changes (and on SIGHUP): no restart to add or stop one.
sparkplay-serve swapper --routes FILE --socket PATH [--group G]
    As root, beside the gateway: starts and stops the units of the models
    the routes file marks on demand, when the gateway asks on PATH.
sparkplay-serve probe --url URL --model NAME [--api-key-env NAME --env-file FILE]
    One look: JSON {health, models, served, answers, answer_s[, why]}; answers
    is a four-token completion within 10 s (what status calls health).
sparkplay-serve verify-unit FILE NAME
    systemd-analyze verify FILE under the unit name NAME (templates land
    under a temporary name that systemd would refuse to parse).
"""
