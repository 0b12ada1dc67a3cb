-- ledgerq's SQL enqueue contract, version 1, on PostgreSQL (migration 0016; docs/producers.md).
-- Statements are separated by lines holding only "-- ;;".
CREATE FUNCTION ledgerq_enqueue_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 1';
-- ;;
COMMENT ON FUNCTION ledgerq_enqueue_version() IS
'The version of the ledgerq_enqueue contract (docs/producers.md).';
-- ;;
CREATE FUNCTION ledgerq_enqueue(
    task text,
    args json DEFAULT '[]',
    queue text DEFAULT 'default',
    kwargs json DEFAULT '{}',
    priority integer DEFAULT 0,
    delay double precision DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 3,
    timeout double precision DEFAULT NULL,
    dedupe_key text DEFAULT NULL,
    dedupe_for double precision DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    held boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
-- The tables are found where the function was installed, whatever the caller's search_path.
SET search_path FROM CURRENT
AS $ledgerq$
#variable_conflict use_column
DECLARE
    max_s CONSTANT double precision := 366 * 86400;
    payload text;
    shape text;
    depth integer := 0;
    initial text;
    new_id bigint;
    holder bigint;
    took boolean;
    p_priority integer := coalesce(ledgerq_enqueue.priority, 0);
    p_delay double precision := coalesce(ledgerq_enqueue.delay, 0);
    p_attempts integer := coalesce(ledgerq_enqueue.max_attempts, 3);
    p_held boolean := coalesce(ledgerq_enqueue.held, false);
    p_key text := ledgerq_enqueue.dedupe_key;
    p_window double precision := ledgerq_enqueue.dedupe_for;
BEGIN
    IF task IS NULL OR length(task) NOT BETWEEN 1 AND 200 OR task ~ '[\x01-\x1f\x7f]' THEN
        RAISE EXCEPTION 'ledgerq: task must be 1 to 200 characters without control characters'
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
        RAISE EXCEPTION 'ledgerq: invalid queue name %: use 1-64 letters, digits, ''_'', ''-'', ''.'' or '':'', starting with a letter or digit',
            quote_nullable(left(queue, 80)) USING ERRCODE = '22023';
    END IF;
    IF json_typeof(coalesce(args, '[]')) <> 'array' THEN
        RAISE EXCEPTION 'ledgerq: args must be a JSON array of positional arguments, got a JSON %',
            json_typeof(args) USING ERRCODE = '22023';
    END IF;
    IF json_typeof(coalesce(kwargs, '{}')) <> 'object' THEN
        RAISE EXCEPTION 'ledgerq: kwargs must be a JSON object of keyword arguments, got a JSON %',
            json_typeof(kwargs) USING ERRCODE = '22023';
    END IF;
    BEGIN
        payload := jsonb_build_object(
            'args', coalesce(args, '[]')::jsonb, 'kwargs', coalesce(kwargs, '{}')::jsonb)::text;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'ledgerq: job arguments must be JSON text a database can store: %',
            SQLERRM USING ERRCODE = '22023';
    END;
    IF octet_length(payload) > 262144 THEN
        RAISE EXCEPTION 'ledgerq: payload of % bytes exceeds the cap of 262144 bytes',
            octet_length(payload) USING ERRCODE = '22023';
    END IF;
    -- Nesting depth: drop the strings, keep the brackets, and peel the innermost pairs once
    -- per level (exact, and a handful of short regular expressions for a usual payload).
    shape := regexp_replace(regexp_replace(payload, '"(?:[^"\\]|\\.)*"', '', 'g'), '[^][{}]', '', 'g');
    WHILE shape <> '' LOOP
        depth := depth + 1;
        IF depth > 32 THEN
            RAISE EXCEPTION 'ledgerq: payload is nested deeper than 32 levels' USING ERRCODE = '22023';
        END IF;
        shape := regexp_replace(shape, '\[\]|\{\}', '', 'g');
    END LOOP;
    IF p_priority NOT BETWEEN -32767 AND 32767 THEN
        RAISE EXCEPTION 'ledgerq: priority must lie within ±32767, got %', p_priority
            USING ERRCODE = '22023';
    END IF;
    IF p_delay = 'NaN' OR p_delay < 0 OR p_delay > max_s THEN
        RAISE EXCEPTION 'ledgerq: delay must be 0 to % seconds (a year; pass run_at for far dates), got %',
            max_s, p_delay USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND p_delay > 0 THEN
        RAISE EXCEPTION 'ledgerq: give either delay or run_at, not both' USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND abs(extract(epoch FROM run_at - clock_timestamp())) > max_s THEN
        RAISE EXCEPTION 'ledgerq: run_at must lie within a year of now, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF p_attempts < 1 THEN
        RAISE EXCEPTION 'ledgerq: max_attempts must be at least 1, got %', p_attempts
            USING ERRCODE = '22023';
    END IF;
    IF timeout = 'NaN' OR timeout <= 0 OR timeout = 'Infinity' THEN
        RAISE EXCEPTION 'ledgerq: timeout must be a positive, finite number of seconds, got %',
            timeout USING ERRCODE = '22023';
    END IF;
    IF p_key IS NOT NULL AND (length(p_key) NOT BETWEEN 1 AND 255 OR p_key ~ '[\x01-\x1f\x7f]') THEN
        RAISE EXCEPTION 'ledgerq: dedupe_key must be 1 to 255 characters without control characters'
            USING ERRCODE = '22023';
    END IF;
    IF p_window IS NOT NULL AND p_key IS NULL THEN
        RAISE EXCEPTION 'ledgerq: dedupe_for needs a dedupe_key' USING ERRCODE = '22023';
    END IF;
    IF p_window = 'NaN' OR p_window <= 0 OR p_window > max_s THEN
        RAISE EXCEPTION 'ledgerq: dedupe_for must be over 0 s and at most a year, got %', p_window
            USING ERRCODE = '22023';
    END IF;
    IF expires_at IS NOT NULL AND expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'ledgerq: expires_at % has already passed', expires_at USING ERRCODE = '22023';
    END IF;

    initial := CASE WHEN p_held THEN 'held'
                    WHEN run_at IS NOT NULL OR p_delay > 0 THEN 'scheduled'
                    ELSE 'queued' END;
    IF p_key IS NULL THEN
        INSERT INTO jobs (queue, task, args, priority, state, max_attempts, timeout_seconds,
                          expires_at, run_at, created_at)
        VALUES (ledgerq_enqueue.queue, ledgerq_enqueue.task, payload, p_priority, initial,
                p_attempts, ledgerq_enqueue.timeout, ledgerq_enqueue.expires_at,
                coalesce(ledgerq_enqueue.run_at, clock_timestamp() + make_interval(secs => p_delay)),
                clock_timestamp())
        RETURNING id INTO new_id;
    ELSE
        -- The same dedupe as Python's enqueue (store/jobs.py, store/dedupe.py): a window of
        -- dedupe_for holds the key even once its job finished; without one, the key is taken
        -- while a job holding it is unfinished. A duplicate returns the holder's id.
        FOR i IN 1..2 LOOP
            took := true;
            IF p_window IS NOT NULL THEN
                UPDATE job_dedupe_windows
                SET job_id = NULL, expires_at = clock_timestamp() + make_interval(secs => p_window)
                WHERE dedupe_key = p_key AND expires_at <= clock_timestamp();
                IF NOT FOUND THEN
                    INSERT INTO job_dedupe_windows (dedupe_key, expires_at)
                    VALUES (p_key, clock_timestamp() + make_interval(secs => p_window))
                    ON CONFLICT DO NOTHING;
                    took := FOUND;
                END IF;
            END IF;
            IF took THEN
                SELECT w.job_id INTO holder FROM job_dedupe_windows AS w
                WHERE w.dedupe_key = p_key AND w.expires_at > clock_timestamp()
                  AND p_window IS NULL;
                IF holder IS NOT NULL THEN
                    RETURN holder;
                END IF;
                FOR j IN 1..2 LOOP
                    INSERT INTO jobs (queue, task, args, priority, state, max_attempts,
                                      timeout_seconds, dedupe_key, expires_at, run_at, created_at)
                    VALUES (ledgerq_enqueue.queue, ledgerq_enqueue.task, payload, p_priority,
                            initial, p_attempts, ledgerq_enqueue.timeout, p_key,
                            ledgerq_enqueue.expires_at,
                            coalesce(ledgerq_enqueue.run_at,
                                     clock_timestamp() + make_interval(secs => p_delay)),
                            clock_timestamp())
                    ON CONFLICT (dedupe_active) WHERE dedupe_active IS NOT NULL DO NOTHING
                    RETURNING id INTO new_id;
                    EXIT WHEN new_id IS NOT NULL;
                    SELECT j.id INTO holder FROM jobs AS j WHERE j.dedupe_active = p_key;
                    EXIT WHEN holder IS NOT NULL;
                END LOOP;
                IF p_window IS NOT NULL THEN
                    UPDATE job_dedupe_windows SET job_id = coalesce(new_id, holder)
                    WHERE dedupe_key = p_key;
                END IF;
                IF new_id IS NULL THEN
                    IF holder IS NULL THEN
                        RAISE EXCEPTION 'ledgerq: could not insert the job of dedupe key %', p_key;
                    END IF;
                    RETURN holder;
                END IF;
                EXIT;
            END IF;
            SELECT w.job_id INTO holder FROM job_dedupe_windows AS w
            WHERE w.dedupe_key = p_key AND w.expires_at > clock_timestamp();
            IF holder IS NOT NULL THEN
                RETURN holder;
            END IF;
        END LOOP;
        IF new_id IS NULL THEN
            RAISE EXCEPTION 'ledgerq: could not take the dedupe window of %', p_key;
        END IF;
    END IF;
    IF initial = 'queued' THEN
        -- The same wake-up as Python's enqueue: delivered when the caller's transaction commits.
        PERFORM pg_notify('ledgerq_jobs', ledgerq_enqueue.queue);
    END IF;
    RETURN new_id;
END;
$ledgerq$;
-- ;;
COMMENT ON FUNCTION ledgerq_enqueue(text, json, text, json, integer, double precision,
    timestamptz, integer, double precision, text, double precision, timestamptz, boolean) IS
'Enqueue a ledgerq job in the caller''s transaction and return its id (contract version 1, docs/producers.md).';
