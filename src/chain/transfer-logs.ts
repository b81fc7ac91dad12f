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
 * Every transfer of the range, read `chunk` blocks a request. A range the node refuses with a JSON-RPC error
 * (providers cap the blocks and the logs of one eth_getLogs) is asked again in halves, down to one block, and
 * the span doubles back after each chunk read; a node that does not answer (a timeout, an HTTP error) fails
 * the scan at once.
 */
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
      if (span === 1n || !answeredWithError(err)) throw err
      span /= 2n
      continue
    }
    out.push(...chainTransfers(logs))
    start = end + 1n
    // Back toward the full chunk: one dense stretch must not leave a day's scan at a block a request.
    span = span * 2n < q.chunk ? span * 2n : q.chunk
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
