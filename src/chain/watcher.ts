// Follows USDC Transfer logs to the treasury and reports each paying transaction once it is confirmed
// (`confirmations` deep: a transfer in a block that may still be reorganised away is never reported), so
// proofs are usually verified before their payer presents them and plain transfers can be matched to
// payments. Chain I/O only; the caller stores.
import { type Address, type Client, getAddress, type Hash } from 'viem'
import { getBlock, getBlockNumber, getTransactionReceipt } from 'viem/actions'
import { authorizationsOf, isMint, type TreasuryTransfer } from './transfer.ts'
import { chainTransfers, narrowerSpan, type RawLog, rawTransferLogs, widerSpan } from './transfer-logs.ts'

export interface WatchOptions {
  usdc: Address
  treasury: Address
  confirmations: number
  pollIntervalMs: number
  onTransfer(transfer: TreasuryTransfer): void | Promise<void>
  /**
   * Each scanned range's transfers at once, after onTransfer. If it throws, the cursor stays: the range is
   * scanned and reported again next poll (so it must be idempotent), and nothing after it is skipped.
   */
  onTransfers?(transfers: TreasuryTransfer[]): Promise<void>
  /** RPC failures (the range is retried next poll) and onTransfer failures (not retried). */
  onError?(err: unknown): void
  /**
   * First block to scan (where an earlier run stopped, so transfers sent while no instance ran are still
   * seen); default the newest block already confirmed at start. A block beyond the chain's head (a dev
   * chain that was reset) falls back to the default.
   */
  fromBlock?: bigint
  /** Called after each range with the next block to scan, so the caller can persist it. */
  onProgress?(nextBlock: bigint): void | Promise<void>
  /**
   * Largest eth_getLogs range; public RPCs refuse wide ones, and providers refuse a range whose logs are too
   * many (at x402 volumes, thousands of treasury transfers a block). Default 1000. A range the node refuses
   * with a JSON-RPC error is halved for the next poll, down to one block; the span doubles back after each
   * range that is read.
   */
  maxBlockRange?: bigint
}

export interface TransferWatcher {
  /** Stops polling; resolves once a poll in progress has finished. */
  stop(): Promise<void>
}

const TIMESTAMP_CACHE_MAX = 256

export function watchTreasuryTransfers(client: Client, options: WatchOptions): TransferWatcher {
  const depth = BigInt(Math.max(1, options.confirmations)) - 1n
  const maxRange = options.maxBlockRange ?? 1000n
  const timestamps = new Map<bigint, number>()
  // The first block not yet scanned. Only confirmed blocks are ever scanned and the cursor only moves
  // past a range once all of it has been reported: no gap, no duplicate, across failed polls.
  let next: bigint | null = options.fromBlock ?? null
  let span = maxRange
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()

  const poll = async () => {
    const head = await getBlockNumber(client, { cacheTime: 0 })
    const safe = head - depth
    if (next !== null && next > head + 1n) next = null
    let from = next ?? (safe < 0n ? 0n : safe)
    next = from
    while (!stopped && from <= safe) {
      const to = from + span - 1n < safe ? from + span - 1n : safe
      let logs: RawLog[]
      try {
        logs = await rawTransferLogs(client, {
          usdc: options.usdc,
          to: options.treasury,
          fromBlock: from,
          toBlock: to,
        })
      } catch (err) {
        // The poll fails as before (retried next poll, nothing skipped); a range the provider refused is
        // asked in half next time, while a node that is down keeps the span it had.
        span = narrowerSpan(span, err) ?? span
        throw err
      }
      span = widerSpan(span, maxRange)
      const transfers = await groupByTransaction(client, logs, timestamps, options.usdc)
      for (const transfer of transfers) {
        if (stopped) return
        try {
          await options.onTransfer(transfer)
        } catch (err) {
          options.onError?.(err)
        }
      }
      if (stopped) return
      if (options.onTransfers && transfers.length > 0) await options.onTransfers(transfers)
      from = to + 1n
      next = from
      await options.onProgress?.(next)
    }
  }

  const tick = () => {
    running = poll()
      .catch((err) => options.onError?.(err))
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, options.pollIntervalMs).unref()
      })
  }
  tick()

  return {
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}

async function groupByTransaction(
  client: Client,
  logs: RawLog[],
  timestamps: Map<bigint, number>,
  usdc: Address,
): Promise<TreasuryTransfer[]> {
  type Grouped = Omit<TreasuryTransfer, 'timestampMs' | 'sender' | 'authorizations'> & { payers: Set<string> }
  const byHash = new Map<string, Grouped>()
  for (const t of chainTransfers(logs)) {
    if (isMint(t)) continue
    const seen = byHash.get(t.hash)
    if (seen) {
      seen.value += t.value
      seen.payers.add(t.from.toLowerCase())
    } else
      byHash.set(t.hash, {
        hash: t.hash,
        from: t.from,
        value: t.value,
        blockNumber: t.blockNumber,
        payers: new Set([t.from.toLowerCase()]),
      })
  }
  const blocks = [...new Set([...byHash.values()].map((t) => t.blockNumber))]
  // Concurrent, so the batching transport sends one request for all the blocks of a range, and one for the
  // transactions' receipts: a Transfer log says neither who sent its transaction (tollgate's own settlements
  // are told apart by it) nor whether an authorization made it (the token's AuthorizationUsed beside it).
  const [stamps, receipts] = await Promise.all([
    Promise.all(blocks.map(async (n) => [n, await blockTimestampMs(client, n, timestamps)] as const)).then(
      (pairs) => new Map(pairs),
    ),
    Promise.all(
      [...byHash.keys()].map(
        async (hash) => [hash, await getTransactionReceipt(client, { hash: hash as Hash })] as const,
      ),
    ).then((pairs) => new Map(pairs)),
  ])
  return [...byHash.values()].map(({ payers, ...t }) => {
    const receipt = receipts.get(t.hash)!
    return {
      ...t,
      sender: getAddress(receipt.from),
      authorizations: authorizationsOf(receipt.logs, usdc, payers),
      timestampMs: stamps.get(t.blockNumber)!,
    }
  })
}

async function blockTimestampMs(
  client: Client,
  blockNumber: bigint,
  cache: Map<bigint, number>,
): Promise<number> {
  const cached = cache.get(blockNumber)
  if (cached !== undefined) return cached
  const block = await getBlock(client, { blockNumber })
  const ms = Number(block.timestamp) * 1000
  if (cache.size >= TIMESTAMP_CACHE_MAX) cache.delete(cache.keys().next().value!)
  cache.set(blockNumber, ms)
  return ms
}
