// USDC Transfer logs by eth_getLogs, as the node sends them: for the treasury watcher and reconcile. Asked
// without viem's getLogs, which decodes every log against the ABI (~40 µs of CPU a log in the x402 bench
// profile, where every settled authorization is a Transfer to the treasury) before decodeTransferLog reads
// it again; reconcile reads a day of them at once.
import { type Address, type Client, type Hash, type Hex, numberToHex, pad } from 'viem'
import { decodeTransferLog, TRANSFER_TOPIC } from './transfer.ts'

/** A log as eth_getLogs answers it: the fields read here. */
export interface RawLog {
  address: Address
  topics: [] | [Hex, ...Hex[]]
  data: Hex
  blockNumber: Hex | null
  transactionHash: Hash | null
  removed?: boolean
}

/** A confirmed ERC-20 Transfer of the token: its transaction, parties (checksummed), value and block. */
export interface ChainTransfer {
  hash: Hash
  from: Address
  to: Address
  value: bigint
  blockNumber: bigint
}

/** The token's Transfer logs from `from` or to `to` in blocks fromBlock..toBlock, undecoded. */
export async function rawTransferLogs(
  client: Client,
  q: { usdc: Address; from?: Address; to?: Address; fromBlock: bigint; toBlock: bigint },
): Promise<RawLog[]> {
  const party = (a: Address | undefined) => (a === undefined ? null : pad(a.toLowerCase() as Hex))
  const logs = (await client.request({
    method: 'eth_getLogs',
    params: [
      {
        address: q.usdc,
        topics: [TRANSFER_TOPIC, party(q.from), party(q.to)],
        fromBlock: numberToHex(q.fromBlock),
        toBlock: numberToHex(q.toBlock),
      },
    ],
  })) as RawLog[]
  if (!Array.isArray(logs)) throw new Error('eth_getLogs answered something else than an array')
  return logs
}

/** The ERC-20 transfers among raw logs (a removed log, an ERC-721 look-alike or a pending one is not). */
export function chainTransfers(logs: RawLog[]): ChainTransfer[] {
  const out: ChainTransfer[] = []
  for (const log of logs) {
    if (log.removed || !log.transactionHash || log.blockNumber === null) continue
    const t = decodeTransferLog(log)
    if (t === null) continue
    out.push({
      hash: log.transactionHash,
      from: t.from,
      to: t.to,
      value: t.value,
      blockNumber: BigInt(log.blockNumber),
    })
  }
  return out
}

/**
 * The span to ask next after `err`: half of it when the node refused the range with a JSON-RPC error
 * (providers cap the blocks and the logs of one eth_getLogs), down to one block; null when the error was
 * not the node's answer (a timeout, an HTTP error: a smaller range would fail the same) or one block was
 * refused already.
 */
export function narrowerSpan(span: bigint, err: unknown): bigint | null {
  if (span === 1n || !answeredWithError(err)) return null
  return span / 2n
}

/** Back toward the full span after a range is read: one dense stretch must not leave the scan at a block a request. */
export function widerSpan(span: bigint, max: bigint): bigint {
  return span * 2n < max ? span * 2n : max
}

/** Every transfer of the range, read `chunk` blocks a request, narrowed where the node refuses the span. */
export async function scanTransfers(
  client: Client,
  q: { usdc: Address; from?: Address; to?: Address; fromBlock: bigint; toBlock: bigint; chunk: bigint },
): Promise<ChainTransfer[]> {
  const out: ChainTransfer[] = []
  let span = q.chunk
  for (let start = q.fromBlock; start <= q.toBlock; ) {
    const end = start + span - 1n < q.toBlock ? start + span - 1n : q.toBlock
    let logs: RawLog[]
    try {
      logs = await rawTransferLogs(client, { ...q, fromBlock: start, toBlock: end })
    } catch (err) {
      const narrower = narrowerSpan(span, err)
      if (narrower === null) throw err
      span = narrower
      continue
    }
    out.push(...chainTransfers(logs))
    start = end + 1n
    span = widerSpan(span, q.chunk)
  }
  return out
}

/** Whether viem's error is the node's own JSON-RPC error answer (not a transport failure). */
function answeredWithError(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (e.name === 'RpcRequestError') return true
  }
  return false
}
