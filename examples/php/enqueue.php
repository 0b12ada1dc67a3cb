<?php
// A ledgerq producer in PHP: enqueue a job inside the application's own PDO transaction through
// the SQL enqueue contract (docs/producers.md), on PostgreSQL or MariaDB/MySQL. The job exists
// exactly when the transaction commits; a rollback leaves nothing behind.
//
// As a library:  require 'enqueue.php';  $id = ledgerq_enqueue($pdo, 'send_sms', [42], 'sms');
// From a shell:  LEDGERQ_PDO_DSN='pgsql:host=127.0.0.1;dbname=app' \
//                php enqueue.php send_sms '[42]' --queue sms --options '{"priority": 1}' [--rollback]
// (LEDGERQ_PDO_USER / LEDGERQ_PDO_PASSWORD give the credentials.) It prints
// {"job_id": N, "committed": true|false} and exits 1 with the database's message on bad input.
declare(strict_types=1);

const LEDGERQ_PG_CASTS = [
    'kwargs' => 'json', 'priority' => 'integer', 'delay' => 'double precision',
    'run_at' => 'timestamptz', 'max_attempts' => 'integer', 'timeout' => 'double precision',
    'dedupe_key' => 'text', 'dedupe_for' => 'double precision', 'expires_at' => 'timestamptz',
    'held' => 'boolean',
];
const LEDGERQ_JSON = JSON_THROW_ON_ERROR | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION;

/**
 * Enqueue $task with the positional $args on $queue, in whatever transaction $pdo is in, and
 * return the job id (the existing job's id when a dedupe_key is taken). $options by name:
 * kwargs (array), priority, delay, run_at, max_attempts, timeout, dedupe_key, dedupe_for,
 * expires_at (DateTimeInterface or ISO 8601 text with a zone), held. Bad input throws a
 * PDOException whose message holds "ledgerq: ..." (with PDO::ERRMODE_EXCEPTION).
 */
function ledgerq_enqueue(PDO $pdo, string $task, array $args = [], string $queue = 'default',
                         array $options = []): int
{
    $argsJson = json_encode(array_values($args), LEDGERQ_JSON);
    foreach ($options as $name => $value) {
        if (!array_key_exists($name, LEDGERQ_PG_CASTS)) {
            throw new InvalidArgumentException("unknown ledgerq option '$name'");
        }
        if ($value instanceof DateTimeInterface) {
            $options[$name] = $value->format('Y-m-d\TH:i:s.uP');
        } elseif ($name === 'kwargs') {
            $options[$name] = (object) $value;  // [] would travel as a JSON array
        }
    }
    if ($pdo->getAttribute(PDO::ATTR_DRIVER_NAME) === 'pgsql') {
        $named = '';
        $params = [$task, $argsJson, $queue];
        foreach ($options as $name => $value) {
            $named .= ", $name => CAST(? AS " . LEDGERQ_PG_CASTS[$name] . ')';
            $params[] = match (true) {
                $name === 'kwargs' => json_encode($value, LEDGERQ_JSON),
                is_bool($value) => $value ? 'true' : 'false',
                default => $value,
            };
        }
        $stmt = $pdo->prepare(
            "SELECT ledgerq_enqueue(CAST(? AS text), CAST(? AS json), CAST(? AS text)$named)"
        );
        $stmt->execute($params);
        return (int) $stmt->fetchColumn();
    }
    // MariaDB/MySQL: the options travel as one JSON object; the OUT parameter through a
    // session variable (PDO cannot bind OUT parameters of MySQL procedures).
    $stmt = $pdo->prepare('CALL ledgerq_enqueue(?, ?, ?, ?, @ledgerq_job_id)');
    $stmt->execute([$task, $argsJson, $queue, $options ? json_encode($options, LEDGERQ_JSON) : null]);
    $stmt->closeCursor();
    return (int) $pdo->query('SELECT @ledgerq_job_id')->fetchColumn();
}

function ledgerq_main(array $argv): int
{
    $rest = array_slice($argv, 1);
    $rollback = in_array('--rollback', $rest, true);
    $rest = array_values(array_filter($rest, fn ($a) => $a !== '--rollback'));
    $flags = ['--queue' => 'default', '--options' => '{}'];
    $positional = [];
    for ($i = 0; $i < count($rest); $i++) {
        if (array_key_exists($rest[$i], $flags) && $i + 1 < count($rest)) {
            $flags[$rest[$i]] = $rest[++$i];
        } else {
            $positional[] = $rest[$i];
        }
    }
    $dsn = getenv('LEDGERQ_PDO_DSN');
    if (count($positional) < 1 || count($positional) > 2 || $dsn === false) {
        fwrite(STDERR, "usage: LEDGERQ_PDO_DSN=... php enqueue.php TASK [ARGS_JSON] [--queue Q]"
            . " [--options JSON] [--rollback]\n");
        return 2;
    }
    try {
        $args = json_decode($positional[1] ?? '[]', true, 512, JSON_THROW_ON_ERROR);
        $options = json_decode($flags['--options'], true, 512, JSON_THROW_ON_ERROR);
        if (!is_array($args) || !array_is_list($args) || !is_array($options)) {
            throw new InvalidArgumentException('ARGS_JSON must be a JSON array and --options a JSON object');
        }
        $pdo = new PDO($dsn, getenv('LEDGERQ_PDO_USER') ?: null,
            getenv('LEDGERQ_PDO_PASSWORD') ?: null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
        $pdo->beginTransaction();
        // ... the application's own writes go here, on the same $pdo and transaction ...
        $jobId = ledgerq_enqueue($pdo, $positional[0], $args, $flags['--queue'], $options);
        $rollback ? $pdo->rollBack() : $pdo->commit();
    } catch (JsonException | InvalidArgumentException | PDOException $e) {
        fwrite(STDERR, 'enqueue failed: ' . $e->getMessage() . "\n");
        return 1;
    }
    echo json_encode(['job_id' => $jobId, 'committed' => !$rollback]), "\n";
    return 0;
}

if (PHP_SAPI === 'cli' && isset($argv[0]) && realpath($argv[0]) === __FILE__) {
    exit(ledgerq_main($argv));
}
