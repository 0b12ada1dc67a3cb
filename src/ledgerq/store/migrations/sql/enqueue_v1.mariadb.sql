-- ledgerq's SQL enqueue contract, version 1, on MariaDB/MySQL (migration 0016; docs/producers.md).
-- Statements are separated by lines holding only "-- ;;". No DELIMITER: each is sent whole.
-- Procedures, not functions: with binary logging on, creating a function needs SUPER (or
-- log_bin_trust_function_creators), which the migration role should not have.
CREATE PROCEDURE ledgerq_enqueue_version(OUT version INT)
NO SQL SQL SECURITY INVOKER
COMMENT 'The version of the ledgerq_enqueue contract (docs/producers.md).'
SET version = 1
-- ;;
CREATE PROCEDURE ledgerq_enqueue(
    IN task TEXT CHARACTER SET utf8mb4,
    IN args LONGTEXT CHARACTER SET utf8mb4,
    IN queue TEXT CHARACTER SET utf8mb4,
    IN options LONGTEXT CHARACTER SET utf8mb4,
    OUT job_id BIGINT
)
MODIFIES SQL DATA
-- The caller's rights: the procedure can do nothing its caller could not (needs EXECUTE).
SQL SECURITY INVOKER
COMMENT 'Enqueue a ledgerq job in the caller''s transaction; job_id gets its id (contract version 1).'
body: BEGIN
    DECLARE max_s DOUBLE DEFAULT 366 * 86400;
    DECLARE msg VARCHAR(128);
    DECLARE payload LONGTEXT CHARACTER SET utf8mb4;
    DECLARE shape LONGTEXT;
    DECLARE depth INT DEFAULT 0;
    DECLARE i INT DEFAULT 0;
    DECLARE k TEXT CHARACTER SET utf8mb4;
    DECLARE t TEXT;
    DECLARE p_kwargs LONGTEXT CHARACTER SET utf8mb4 DEFAULT '{}';
    DECLARE p_priority BIGINT DEFAULT 0;
    DECLARE p_delay DOUBLE DEFAULT 0;
    DECLARE p_run_at DATETIME(6) DEFAULT NULL;
    DECLARE p_attempts BIGINT DEFAULT 3;
    DECLARE p_timeout DOUBLE DEFAULT NULL;
    DECLARE p_key TEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE p_window DOUBLE DEFAULT NULL;
    DECLARE p_expires DATETIME(6) DEFAULT NULL;
    DECLARE p_held BOOLEAN DEFAULT FALSE;
    DECLARE initial VARCHAR(16);
    DECLARE holder BIGINT DEFAULT NULL;
    DECLARE took BOOLEAN;
    DECLARE duplicate BOOLEAN DEFAULT FALSE;
    DECLARE CONTINUE HANDLER FOR 1062 SET duplicate = TRUE;

    SET job_id = NULL;
    IF task IS NULL OR CHAR_LENGTH(task) NOT BETWEEN 1 AND 200
            OR task REGEXP '[\\x{00}-\\x{1f}\\x{7f}]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'ledgerq: task must be 1 to 200 characters without control characters';
    END IF;
    IF queue IS NULL OR NOT queue REGEXP BINARY '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\\z' THEN
        SET msg = LEFT(CONCAT('ledgerq: invalid queue name ', QUOTE(LEFT(IFNULL(queue, 'NULL'), 64)),
            ': use 1-64 letters, digits, _ - . or :'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
    SET args = IFNULL(args, '[]');
    IF NOT JSON_VALID(args) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'ledgerq: args must be JSON (nested at most 32 levels)';
    END IF;
    IF JSON_TYPE(args) <> 'ARRAY' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'ledgerq: args must be a JSON array of positional arguments';
    END IF;
    SET options = IFNULL(options, '{}');
    IF NOT JSON_VALID(options) OR JSON_TYPE(options) <> 'OBJECT' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: options must be a JSON object or NULL';
    END IF;
    WHILE i < JSON_LENGTH(options) DO
        SET k = JSON_VALUE(JSON_KEYS(options), CONCAT('$[', i, ']'));
        SET t = JSON_TYPE(JSON_EXTRACT(options, CONCAT('$."', k, '"')));
        IF t = 'NULL' AND k IN ('priority', 'max_attempts', 'delay', 'timeout', 'dedupe_for',
                'run_at', 'expires_at', 'dedupe_key', 'held', 'kwargs') THEN
            SET t = NULL;  -- null: the option's default
        ELSEIF k IN ('priority', 'max_attempts') THEN
            IF t <> 'INTEGER' THEN
                SET msg = CONCAT('ledgerq: ', k, ' must be a whole number');
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
            END IF;
        ELSEIF k IN ('delay', 'timeout', 'dedupe_for') THEN
            IF t NOT IN ('INTEGER', 'DOUBLE') THEN
                SET msg = CONCAT('ledgerq: ', k, ' must be a number of seconds');
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
            END IF;
        ELSEIF k IN ('run_at', 'expires_at') THEN
            IF t <> 'STRING' OR NOT JSON_VALUE(options, CONCAT('$.', k)) REGEXP
                '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$' THEN
                SET msg = CONCAT('ledgerq: ', k, ' must be an ISO 8601 time with a zone (2030-01-01T00:00:00Z)');
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
            END IF;
        ELSEIF k = 'dedupe_key' THEN
            IF t <> 'STRING' THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: dedupe_key must be a string';
            END IF;
        ELSEIF k = 'held' THEN
            IF t <> 'BOOLEAN' THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: held must be true or false';
            END IF;
        ELSEIF k = 'kwargs' THEN
            IF t <> 'OBJECT' THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
                    'ledgerq: kwargs must be a JSON object of keyword arguments';
            END IF;
        ELSE
            SET msg = LEFT(CONCAT('ledgerq: unknown option ', QUOTE(LEFT(k, 40)), ' (see docs/producers.md)'), 128);
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
        END IF;
        SET i = i + 1;
    END WHILE;
    IF JSON_EXISTS(options, '$.kwargs') THEN
        SET p_kwargs = JSON_EXTRACT(options, '$.kwargs');
    END IF;
    SET p_priority = IFNULL(JSON_VALUE(options, '$.priority'), 0);
    SET p_delay = IFNULL(JSON_VALUE(options, '$.delay'), 0);
    SET p_attempts = IFNULL(JSON_VALUE(options, '$.max_attempts'), 3);
    SET p_timeout = JSON_VALUE(options, '$.timeout');
    SET p_key = JSON_VALUE(options, '$.dedupe_key');
    SET p_window = JSON_VALUE(options, '$.dedupe_for');
    SET p_held = IFNULL(JSON_EXTRACT(options, '$.held') = 'true', FALSE);
    SET t = JSON_VALUE(options, '$.run_at');
    IF t IS NOT NULL THEN
        BEGIN
        DECLARE EXIT HANDLER FOR 1292  -- an impossible date (2027-02-31) in strict mode
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: run_at is not a valid time';
        SET p_run_at = IF(RIGHT(t, 1) IN ('Z', 'z'),
            CAST(REPLACE(LEFT(t, CHAR_LENGTH(t) - 1), 'T', ' ') AS DATETIME(6)),
            CONVERT_TZ(CAST(REPLACE(LEFT(t, CHAR_LENGTH(t) - 6), 'T', ' ') AS DATETIME(6)),
                       RIGHT(t, 6), '+00:00'));
        IF p_run_at IS NULL THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: run_at is not a valid time';
        END IF;
        END;
    END IF;
    SET t = JSON_VALUE(options, '$.expires_at');
    IF t IS NOT NULL THEN
        BEGIN
        DECLARE EXIT HANDLER FOR 1292  -- an impossible date (2027-02-31) in strict mode
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: expires_at is not a valid time';
        SET p_expires = IF(RIGHT(t, 1) IN ('Z', 'z'),
            CAST(REPLACE(LEFT(t, CHAR_LENGTH(t) - 1), 'T', ' ') AS DATETIME(6)),
            CONVERT_TZ(CAST(REPLACE(LEFT(t, CHAR_LENGTH(t) - 6), 'T', ' ') AS DATETIME(6)),
                       RIGHT(t, 6), '+00:00'));
        IF p_expires IS NULL THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: expires_at is not a valid time';
        END IF;
        END;
    END IF;

    SET payload = CONCAT('{"args":', JSON_COMPACT(args), ',"kwargs":', JSON_COMPACT(p_kwargs), '}');
    IF OCTET_LENGTH(payload) > 262144 THEN
        SET msg = CONCAT('ledgerq: payload of ', OCTET_LENGTH(payload),
            ' bytes exceeds the cap of 262144 bytes');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
    -- Nesting depth: drop the strings, keep the brackets, and peel the innermost pairs once
    -- per level (exact; possessive patterns so a long string cannot exhaust PCRE's stack).
    SET shape = REGEXP_REPLACE(REGEXP_REPLACE(payload, '"(?:[^"\\\\]++|\\\\.)*+"', ''), '[^][{}]', '');
    WHILE shape <> '' DO
        SET depth = depth + 1;
        IF depth > 32 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: payload is nested deeper than 32 levels';
        END IF;
        SET shape = REGEXP_REPLACE(shape, '\\[\\]|\\{\\}', '');
    END WHILE;
    IF p_priority NOT BETWEEN -32767 AND 32767 THEN
        SET msg = CONCAT('ledgerq: priority must lie within -32767..32767, got ', p_priority);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
    IF p_delay < 0 OR p_delay > max_s THEN
        SET msg = CONCAT('ledgerq: delay must be 0 to 31622400 seconds (a year; use run_at), got ', p_delay);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
    IF p_run_at IS NOT NULL AND p_delay > 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: give either delay or run_at, not both';
    END IF;
    IF p_run_at IS NOT NULL AND ABS(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), p_run_at)) > max_s THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: run_at must lie within a year of now';
    END IF;
    IF p_attempts < 1 THEN
        SET msg = CONCAT('ledgerq: max_attempts must be at least 1, got ', p_attempts);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
    IF p_timeout <= 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'ledgerq: timeout must be a positive, finite number of seconds';
    END IF;
    IF p_key IS NOT NULL AND (CHAR_LENGTH(p_key) NOT BETWEEN 1 AND 255
            OR p_key REGEXP '[\\x{00}-\\x{1f}\\x{7f}]') THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'ledgerq: dedupe_key must be 1 to 255 characters without control characters';
    END IF;
    IF p_window IS NOT NULL AND p_key IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: dedupe_for needs a dedupe_key';
    END IF;
    IF p_window <= 0 OR p_window > max_s THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: dedupe_for must be over 0 s and at most a year';
    END IF;
    IF p_expires IS NOT NULL AND p_expires <= UTC_TIMESTAMP(6) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: expires_at has already passed';
    END IF;

    SET initial = CASE WHEN p_held THEN 'held'
                       WHEN p_run_at IS NOT NULL OR p_delay > 0 THEN 'scheduled'
                       ELSE 'queued' END;
    SET p_run_at = IFNULL(p_run_at,
        TIMESTAMPADD(MICROSECOND, ROUND(p_delay * 1000000), UTC_TIMESTAMP(6)));
    IF p_key IS NULL THEN
        INSERT INTO jobs (queue, task, args, priority, state, max_attempts, timeout_seconds,
                          expires_at, run_at, created_at)
        VALUES (queue, task, payload, p_priority, initial, p_attempts, p_timeout, p_expires,
                p_run_at, UTC_TIMESTAMP(6));
        SET job_id = LAST_INSERT_ID();
        LEAVE body;
    END IF;
    -- The same dedupe as Python's enqueue (store/jobs.py, store/dedupe.py): a window of
    -- dedupe_for holds the key even once its job finished; without one, the key is taken
    -- while a job holding it is unfinished. A duplicate gets the holder's id. A duplicate-key
    -- error (1062) undoes only its statement; the handler above notes it. The lookups are
    -- locking reads: under REPEATABLE READ (the server's default) a plain read would keep the
    -- transaction's first snapshot and miss the holder a concurrent producer just committed.
    SET i = 0;
    WHILE i < 2 DO
        SET i = i + 1, took = TRUE;
        IF p_window IS NOT NULL THEN
            UPDATE job_dedupe_windows AS w
            SET w.job_id = NULL,
                w.expires_at = TIMESTAMPADD(MICROSECOND, ROUND(p_window * 1000000), UTC_TIMESTAMP(6))
            WHERE w.dedupe_key = p_key AND w.expires_at <= UTC_TIMESTAMP(6);
            IF ROW_COUNT() = 0 THEN
                SET duplicate = FALSE;
                INSERT INTO job_dedupe_windows (dedupe_key, expires_at) VALUES
                    (p_key, TIMESTAMPADD(MICROSECOND, ROUND(p_window * 1000000), UTC_TIMESTAMP(6)));
                SET took = NOT duplicate;
            END IF;
        ELSE
            SET holder = (SELECT w.job_id FROM job_dedupe_windows AS w
                          WHERE w.dedupe_key = p_key AND w.expires_at > UTC_TIMESTAMP(6)
                          LOCK IN SHARE MODE);
            IF holder IS NOT NULL THEN
                SET job_id = holder;
                LEAVE body;
            END IF;
        END IF;
        IF took THEN
            SET duplicate = FALSE;
            INSERT INTO jobs (queue, task, args, priority, state, max_attempts, timeout_seconds,
                              dedupe_key, expires_at, run_at, created_at)
            VALUES (queue, task, payload, p_priority, initial, p_attempts, p_timeout, p_key,
                    p_expires, p_run_at, UTC_TIMESTAMP(6));
            IF duplicate THEN
                SET holder = (SELECT j.id FROM jobs AS j WHERE j.dedupe_active = p_key
                              LOCK IN SHARE MODE);
                IF holder IS NULL THEN  -- its holder finished meanwhile: once more
                    SET duplicate = FALSE;
                    INSERT INTO jobs (queue, task, args, priority, state, max_attempts,
                                      timeout_seconds, dedupe_key, expires_at, run_at, created_at)
                    VALUES (queue, task, payload, p_priority, initial, p_attempts, p_timeout,
                            p_key, p_expires, p_run_at, UTC_TIMESTAMP(6));
                    IF duplicate THEN
                        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
                            'ledgerq: could not insert the job of its dedupe key';
                    END IF;
                    SET job_id = LAST_INSERT_ID();
                ELSE
                    SET job_id = holder;
                END IF;
            ELSE
                SET job_id = LAST_INSERT_ID();
            END IF;
            IF p_window IS NOT NULL THEN
                UPDATE job_dedupe_windows AS w SET w.job_id = job_id WHERE w.dedupe_key = p_key;
            END IF;
            LEAVE body;
        END IF;
        SET holder = (SELECT w.job_id FROM job_dedupe_windows AS w
                      WHERE w.dedupe_key = p_key AND w.expires_at > UTC_TIMESTAMP(6)
                      LOCK IN SHARE MODE);
        IF holder IS NOT NULL THEN
            SET job_id = holder;
            LEAVE body;
        END IF;
    END WHILE;
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledgerq: could not take the dedupe window of its key';
END
