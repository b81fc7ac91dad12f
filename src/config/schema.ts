// The valibot schema of every setting; the Config type is inferred from it, so the two never drift.
import { isIP } from 'node:net'
import * as v from 'valibot'

const Ms = v.pipe(v.number(), v.integer(), v.minValue(0))
const PositiveInt = v.pipe(v.number(), v.integer(), v.minValue(1))
const Port = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(65535))
const Dollars = v.pipe(v.number(), v.minValue(0))
/** A signer's name as operators write it in rules and see it as a metric label: short, no spaces. */
const SignerName = v.pipe(
  v.string(),
  v.regex(/^[a-z0-9][a-z0-9_.-]{0,62}$/, 'must be lowercase letters, digits, _ . -'),
)
const HttpUrl = v.pipe(v.string(), v.url())
const HexAddress = v.pipe(
  v.string(),
  v.regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address'),
)

function isCidr(entry: string): boolean {
  const [address, bits, extra] = entry.split('/')
  const family = isIP(address ?? '')
  if (family === 0 || extra !== undefined) return false
  if (bits === undefined) return true
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128)
}

const RateBucket = v.strictObject({
  /** Requests allowed at once. */
  burst: v.pipe(v.number(), v.integer(), v.minValue(1)),
  /** Sustained rate; 0 = this surface is not limited. */
  per_minute: v.pipe(v.number(), v.integer(), v.minValue(0)),
})

export const Network = v.picklist(['local', 'base', 'base-sepolia'])
export type Network = v.InferOutput<typeof Network>

export const LogLevel = v.picklist(['debug', 'info', 'warn', 'error', 'silent'])
export type LogLevel = v.InferOutput<typeof LogLevel>

export const AccessLogMode = v.picklist(['off', 'sampled', 'all'])
export type AccessLogMode = v.InferOutput<typeof AccessLogMode>

export const ConfigSchema = v.strictObject({
  server: v.strictObject({
    host: v.pipe(v.string(), v.minLength(1)),
    port: Port,
    admin_port: Port,
    /** Base of payment_url and metered_url; null → http://{host}:{port}. */
    public_url: v.nullable(HttpUrl),
    threads: v.pipe(PositiveInt, v.maxValue(64)),
    /** Data-plane processes sharing the port (SO_REUSEPORT), supervised by one parent; 0 → one per core. */
    workers: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(64)),
    body_limit_bytes: PositiveInt,
    shutdown_grace_ms: Ms,
    /** Hostile input: request heads above these are answered 431. uWS itself handles at most 48 header
     * lines (more get no answer and are closed when idle) and drops heads far above 64 KiB. */
    max_header_bytes: v.pipe(v.number(), v.integer(), v.minValue(1024)),
    max_headers: v.pipe(PositiveInt, v.maxValue(48)),
    /**
     * Request bodies sent with Transfer-Encoding: chunked. uWS de-chunks them in C++ without checking the
     * line ends (a bare-LF chunk line, any two bytes after a chunk's data) and never tells JS: false
     * (default) answers them 411 and closes; true accepts them, only behind a proxy that re-frames bodies.
     */
    accept_chunked_requests: v.boolean(),
    /**
     * Proxies (CIDRs or addresses) whose X-Forwarded-For / Forwarded name the client for rate limits; empty
     * (default): the peer address is the client and those headers are ignored.
     */
    trusted_proxies: v.array(
      v.pipe(
        v.string(),
        v.check((entry) => isCidr(entry), 'each entry must be an IP address or a CIDR such as 10.0.0.0/8'),
      ),
    ),
  }),
  database: v.strictObject({
    /** null → embedded PGlite in data_dir. */
    url: v.nullable(v.pipe(v.string(), v.regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'))),
    data_dir: v.pipe(v.string(), v.minLength(1)),
    pool_max: PositiveInt,
    /**
     * Server-side statement_timeout of the service's connections (0 = none): a statement held by a lock or
     * a stalled server fails and its caller answers 503, instead of holding every paid call behind it.
     * Must stay above claims.timeout_ms (checked at start): a COMMIT cut short while it waits for a
     * synchronous standby is reported as a success on the primary alone.
     */
    statement_timeout_ms: Ms,
    /** How long opening a database connection may take (a black-holed or frozen server) before it fails. */
    connect_timeout_ms: PositiveInt,
    /**
     * The embedded database has no autovacuum: the leader checks its tables this often and vacuums or
     * analyzes those autovacuum's thresholds say are due (src/db/embedded-vacuum.ts). Unused on a server.
     */
    embedded_vacuum_interval_ms: PositiveInt,
    /**
     * Refuse paid calls (503 replication_unsafe) while standbys are attached to the primary and none of them
     * is synchronous (or synchronous_commit is off/local): after a failover to such a standby, proofs
     * served in the last moments are forgotten and serve again (docs/failover.md). No standby at all is
     * not refused. Off: the state is reported (metric, /readyz, a warning), paid calls go on.
     */
    require_synchronous_standby: v.boolean(),
    /** How often the primary's replication state is read (src/db/replication-watch.ts). Unused embedded. */
    replication_check_ms: PositiveInt,
  }),
  chain: v.strictObject({
    network: Network,
    /** null on `local` → the service starts its own anvil. Required on base / base-sepolia. */
    rpc_url: v.nullable(HttpUrl),
    usdc_address: v.nullable(HexAddress),
    confirmations: PositiveInt,
    max_proof_age_ms: PositiveInt,
    poll_interval_ms: PositiveInt,
    rpc_timeout_ms: PositiveInt,
    /** Calls per JSON-RPC batch request, at most: providers refuse a larger batch whole (100 is common). */
    rpc_batch_max: v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(1000)),
    dev_payers: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(100)),
    dev_payer_funding: Dollars,
  }),
  verify: v.strictObject({
    /** How long a transaction the node knows (pending, or mined but not yet confirmed) is waited for. */
    wait_ms: Ms,
    /** How long a hash the node has never seen (no receipt, not in its mempool) is asked about; ≤ wait_ms. */
    unseen_wait_ms: Ms,
    /** A hash the chain did not know within wait_ms is answered transaction_not_found from memory this long. */
    not_found_ttl_ms: Ms,
  }),
  fees: v.strictObject({
    owner_share_bps: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(10000)),
  }),
  proxy: v.strictObject({
    retry_window_ms: Ms,
    upstream_timeout_ms: PositiveInt,
    quote_ttl_ms: Ms,
    allow_private_upstreams: v.boolean(),
    /** The relay's HTTP/1.1 client: tollgate's own (lean), or undici's Agent. */
    upstream_client: v.picklist(['lean', 'undici']),
    max_price: Dollars,
  }),
  caches: v.strictObject({
    endpoints_max: PositiveInt,
    verified_transfers_max: PositiveInt,
    claimed_proofs_max: PositiveInt,
    /** API keys remembered as valid, and for how long (0: every request reads its key). */
    api_keys_max: PositiveInt,
    api_keys_ttl_ms: Ms,
  }),
  claims: v.strictObject({
    batch_max: PositiveInt,
    capture_flush_ms: Ms,
    /**
     * A paid call whose claim is not written within this is answered 503 (0 = wait): a frozen or locked
     * database must not hold every paid call. A claim that wins after its call gave up is released.
     */
    timeout_ms: Ms,
  }),
  payments: v.strictObject({
    max_amount: Dollars,
    default_expires_in_ms: PositiveInt,
    /** Creations written in one statement and commit, at most, and such statements in flight at once. */
    create_batch_max: PositiveInt,
    create_concurrency: PositiveInt,
  }),
  payouts: v.strictObject({
    interval_ms: PositiveInt,
    threshold: Dollars,
    min_amount: Dollars,
    /** How often the leader checks for a wallet over the threshold (and for payouts left open by a crash). */
    threshold_check_interval_ms: PositiveInt,
    /** How long one run waits for its transactions' confirmations before leaving them to the next run. */
    confirm_timeout_ms: PositiveInt,
    /** Backoff after a failed payout: retry_base_ms × 2^(attempt−1), at most retry_max_ms. */
    retry_base_ms: Ms,
    retry_max_ms: Ms,
    /** Wallets paid per batch (one transaction each) and ledger entries read per batch. */
    max_wallets_per_batch: PositiveInt,
    max_entries_per_batch: PositiveInt,
    /** Time range of the admin port's /reconcile report (ending now). */
    reconcile_range_ms: PositiveInt,
    /** Blocks per eth_getLogs request when reconciling (RPC providers cap the range). */
    reconcile_block_chunk: PositiveInt,
    /**
     * An incremental reconcile starts this long before the last clean run's end: a claim made just before
     * it may still be captured, refunded or settled after (≥ proxy.retry_window_ms and x402 timeouts).
     */
    reconcile_lookback_ms: PositiveInt,
  }),
  settlement: v.strictObject({
    /** A run drains the whole backlog (batch after batch), so this is only the idle re-check period. */
    interval_ms: PositiveInt,
    /** Authorizations listed per step of a run; their transactions are in flight at once (consecutive nonces). */
    batch_max: PositiveInt,
    /** Authorizations per transaction through the AuthorizationBatcher when the chain has it; 1: one each. At
     * most 100: its gas limit (250k + 120k each) stays under EIP-7825's 2^24 cap per transaction. */
    per_transaction: v.pipe(PositiveInt, v.maxValue(100)),
    confirm_timeout_ms: PositiveInt,
    receipt_poll_ms: PositiveInt,
    /** Readiness goes red when the soonest unsettled validBefore is fewer seconds away than this. */
    readiness_margin_s: PositiveInt,
    /** Intake throttle: new x402 payloads get 503 settlement_backlog past either limit. */
    throttle_backlog_count: PositiveInt,
    throttle_oldest_s: PositiveInt,
    throttle_retry_after_s: PositiveInt,
    /** How often the throttle flag is refreshed from the database. */
    throttle_check_ms: PositiveInt,
    /**
     * Settle an `exact` authorization before the answer's head is sent, so its receipt names the mined
     * transaction that carries it (what published x402 clients read as paid). On by default (`enabled`: what an
     * endpoint that makes no x402_settlement choice gets); off: settled after the call, in the leader's
     * batches, with a pending receipt. Calls served together share one transaction (group commit), sent from
     * this process's settler slot (docs/x402-receipts.md); the answer waits at most wait_ms for the receipt,
     * then says settlement_pending with the transaction hash.
     */
    before_answer: v.strictObject({
      enabled: v.boolean(),
      window_ms: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(1000)),
      wait_ms: PositiveInt,
      /**
       * Settler keys derived from one secret (SETTLER_PRIVATE_KEY, else the treasury key): each data-plane
       * process, worker or instance, owns one through a database advisory lock. A process finding none free
       * settles after the call (honest pending receipts). At least the fleet's data-plane process count.
       */
      slots: v.pipe(PositiveInt, v.maxValue(1024)),
      /** Below this balance (ETH) a settler's /readyz check fails and SettlerGasLow fires, before it runs dry. */
      gas_floor_eth: v.pipe(v.number(), v.minValue(0)),
      /** How often the settler's balance is read (also after each of its transactions is mined, at most this often). */
      gas_check_ms: PositiveInt,
      /**
       * x402 upto: an answer is held whole until its charge is settled, up to this many bytes; a larger one
       * goes out streaming once past it, with a pending receipt (settled after, from the settler).
       */
      held_answer_max_bytes: PositiveInt,
    }),
  }),
  /** tollgate as an x402 facilitator (/api/v1/facilitator, docs/facilitator.md). */
  facilitator: v.strictObject({
    /** How long POST /settle waits for the batch transaction carrying its payload to be mined; past it the
     * answer is `settlement_pending` with the hash (or none yet), and a retry gets the outcome. */
    settle_wait_ms: PositiveInt,
  }),
  x402: v.strictObject({
    /** maxTimeoutSeconds in the 402 accepts: how long a client's authorization stays valid (validBefore). */
    max_timeout_seconds: v.pipe(PositiveInt, v.minValue(30)),
    /** Dry-run the settlement (eth_call of transferWithAuthorization) before serving an authorization of at
     * least this many dollars; null (default): never. Costs one RPC round trip on those calls. */
    simulate_min_price: v.nullable(Dollars),
    /**
     * x402 exact: how long a payer's balance read is reused for its next authorizations (0: read every
     * time). Safe at any value below two minutes: the claim counts every authorization settled after the
     * block the read was made at (src/books/claims.ts); a longer reuse only delays seeing a top-up.
     */
    balance_ttl_ms: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(60_000)),
    /**
     * x402 exact: the factories whose smart wallets may pay before they are deployed (an ERC-6492 signature
     * carrying the factory's call): the AuthorizationBatcher deploys such a wallet in the transaction that
     * settles it, the treasury (or settler) paying the gas. Empty (default): such payers are refused, as the
     * published facilitator's eip6492AllowedFactories. Only where the chain holds the batcher.
     */
    eip6492_factories: v.array(HexAddress),
    /**
     * batch-settlement vouchers: an instance leases a channel for batch_lease_ms and accepts its
     * vouchers in memory up to batch_reserve dollars past the last persisted one, persisting every
     * batch_flush_ms. A crash costs at most batch_reserve per channel (the gateway's, never the payer's).
     */
    batch_lease_ms: v.pipe(PositiveInt, v.minValue(100)),
    batch_flush_ms: PositiveInt,
    batch_reserve: Dollars,
    /** How often the leader claims served vouchers on chain (one transaction for every channel with calls);
     * far below the 900 s withdraw delay, so vouchers are claimed before a withdrawal can finish. */
    batch_claim_interval_ms: v.pipe(PositiveInt, v.minValue(100), v.maxValue(600_000)),
    /**
     * The `payment-identifier` extension: answers to paid calls that carry an identifier are kept for ttl_ms
     * (in the database, so any instance replays them), each up to max_answer_bytes of body, all together up
     * to max_total_bytes; an answer over either bound is not kept, and a retry is told so.
     */
    paid_answers: v.strictObject({
      ttl_ms: PositiveInt,
      max_answer_bytes: PositiveInt,
      max_total_bytes: PositiveInt,
    }),
  }),
  webhooks: v.strictObject({
    retry_schedule_ms: v.array(Ms),
    timeout_ms: PositiveInt,
    concurrency: PositiveInt,
    disable_after_ms: PositiveInt,
    poll_interval_ms: PositiveInt,
  }),
  jobs: v.strictObject({
    enabled: v.boolean(),
    expiry_interval_ms: PositiveInt,
  }),
  /** Bounded history: what the leader's retention job prunes, and when. */
  retention: v.strictObject({
    interval_ms: PositiveInt,
    /** Delivered/failed webhook deliveries and their attempts, and dispatched events, older than this. */
    webhooks_ms: PositiveInt,
    events_ms: PositiveInt,
    /**
     * Claims go once their proof can no longer be accepted: a transaction older than chain.max_proof_age_ms
     * (an x402 authorization past its validBefore) is refused by the verifier, plus this margin for clocks.
     */
    claims_margin_ms: Ms,
    /**
     * How often each verifier re-reads the stored retention horizons; a horizon is deleted below only after
     * it was announced for two of these plus a second, so every instance refuses those proofs first.
     */
    horizon_refresh_ms: PositiveInt,
    /** A batch-settlement voucher's call, settled on chain this long ago (below its channel's total). */
    voucher_claims_ms: Ms,
    /** Rows deleted per statement, and statements per table per run (a run never holds locks for long). */
    batch_rows: PositiveInt,
    max_batches: PositiveInt,
    /**
     * Month partitions of calls, ledger entries and call deliveries (migration 0041): the leader creates the
     * current and next two months every partitions_interval_ms, and moves rows that fell into the default
     * partition into their month.
     */
    partitions_interval_ms: PositiveInt,
    /**
     * Retention by partitions: months older than this many whole months before the current one are
     * archived (a gzip file per partition, src/books/archive.ts) and dropped whole. 0 = off (keep all).
     */
    archive_after_months: v.pipe(v.number(), v.integer(), v.minValue(0)),
    /** Where the archive files go (relative to the working directory). */
    archive_dir: v.pipe(v.string(), v.minLength(1)),
  }),
  // --- Hostile input and the admin port ---
  /** The admin port's own address: loopback unless deliberately exposed. Its token is ADMIN_TOKEN. */
  admin: v.strictObject({ host: v.pipe(v.string(), v.minLength(1)) }),
  /** Token buckets per client address on unauthenticated surfaces; never applied to a request carrying a
   * payment proof. per_minute 0 turns one surface off, enabled false all of them. */
  rate_limits: v.strictObject({
    enabled: v.boolean(),
    /** Addresses remembered per surface (least recently seen forgotten first). */
    max_keys: PositiveInt,
    register: RateBucket,
    failed_api_keys: RateBucket,
    unpaid_metered: RateBucket,
    checkout: RateBucket,
    /** Chain look-ups (unknown transaction hashes, x402 authorizations) one client may have in flight. */
    chain_lookups_per_client: PositiveInt,
    /** One bucket for the whole admin /reconcile route (it scans the chain). */
    admin_reconcile: RateBucket,
  }),
  /** The local dev chain's state file: it survives restarts with .data/ (null: a fresh chain each start). */
  local_chain: v.strictObject({
    state_file: v.nullable(v.pipe(v.string(), v.minLength(1))),
    /** The dev chain stands in for this network in x402 terms (chain id, network name, USDC address), so
     * published x402 clients pay it unchanged; null: anvil's own chain 31337, network name 'local'. */
    announce_as: v.nullable(v.picklist(['base-sepolia'])),
  }),
  /** Who is calling (docs/agent-identity.md): Web Bot Auth / RFC 9421 signatures and the keys trusted for them. */
  identity: v.pipe(
    v.strictObject({
      /** Key directories allowed: `name` is what rules match and metrics label; `url` null → the
       * signature_agent origin's /.well-known/http-message-signatures-directory. */
      directories: v.array(
        v.strictObject({
          name: SignerName,
          signature_agent: HttpUrl,
          url: v.nullable(HttpUrl),
        }),
      ),
      /** Keys configured directly (no directory): a public key in PEM, or for hmac-sha256 a base64 secret. */
      keys: v.array(
        v.strictObject({
          name: SignerName,
          keyid: v.pipe(v.string(), v.minLength(1), v.maxLength(256)),
          alg: v.picklist([
            'ed25519',
            'rsa-pss-sha512',
            'ecdsa-p256-sha256',
            'rsa-v1_5-sha256',
            'hmac-sha256',
          ]),
          key: v.pipe(v.string(), v.minLength(1)),
        }),
      ),
      /** Hosts this service answers as (checked against the signed @authority); empty: the request's Host. */
      authorities: v.array(v.pipe(v.string(), v.minLength(1))),
      max_lifetime_s: PositiveInt,
      clock_skew_s: v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(300)),
      allow_private_directories: v.boolean(),
      directory_fetch_timeout_ms: PositiveInt,
      directory_min_ttl_ms: Ms,
      directory_max_ttl_ms: Ms,
      directory_default_ttl_ms: Ms,
      directory_retry_ms: PositiveInt,
      directory_max_bytes: PositiveInt,
    }),
    v.check(
      (i) =>
        new Set([...i.directories, ...i.keys].map((s) => s.name)).size ===
        i.directories.length + i.keys.length,
      'identity: each directory and key needs its own name',
    ),
    v.check(
      (i) => i.directory_min_ttl_ms <= i.directory_max_ttl_ms,
      'identity: directory_min_ttl_ms > directory_max_ttl_ms',
    ),
  ),
  // --- end of the hostile-input settings ---
  // Logs and traces (docs/operations.md, "Observability: logs and traces").
  log: v.strictObject({
    level: LogLevel,
    /** Access log of /m/* and /pay/*: off (default, the hot path pays nothing), sampled, all. */
    access: AccessLogMode,
    /** Share of requests logged in `sampled` mode. */
    access_sample_rate: v.pipe(v.number(), v.minValue(0), v.maxValue(1)),
  }),
  tracing: v.strictObject({
    /** OTLP/HTTP base URL; null → tracing off and no OpenTelemetry module loaded. */
    otlp_endpoint: v.nullable(HttpUrl),
    service_name: v.pipe(v.string(), v.minLength(1)),
    /** Share of new traces recorded; a caller's sampled traceparent is always followed. */
    sample_ratio: v.pipe(v.number(), v.minValue(0), v.maxValue(1)),
    export_interval_ms: PositiveInt,
  }),
})

/** Settings from files and environment, plus the secrets that only the environment may carry. */
export type Settings = v.InferOutput<typeof ConfigSchema>
export type Config = Readonly<
  Settings & {
    secrets: {
      treasury_private_key: `0x${string}` | null
      /** Sends settle-before-answer transactions (gas only; the money goes to the treasury). */
      settler_private_key: `0x${string}` | null
      /** ADMIN_TOKEN: bearer token for the admin routes beyond /metrics, /healthz, /readyz; null = off. */
      admin_token: string | null
      /** RECEIPT_SIGNING_KEY: signs x402 offers and receipts; null = unsigned (a dev key on the local chain). */
      receipt_signing_key: `0x${string}` | null
      /** RECEIPT_PREVIOUS_SIGNERS: addresses of rotated-out signing keys, still published for verification. */
      receipt_previous_signers: readonly string[]
    }
  }
>
