// Which transaction used an EIP-3009 authorization. The token logs AuthorizationUsed(authorizer, nonce) in
// the transaction that moves the money, and the money can only go where the signature says (the treasury),
// whoever sent it. A settlement of ours that finds its authorization already used did not carry the money:
// an earlier transaction did (one of ours whose broadcast answer was lost, or anyone's). The books must name
// that one, or the claim points at a transaction with no transfer and reconcile cannot match it.
import { type Address, type Client, type Hash, type Hex, parseAbi, parseAbiItem, parseEventLogs } from 'viem'
import { getBlockNumber, getLogs, getTransactionReceipt } from 'viem/actions'

const authorizationUsed = parseAbiItem(
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
)
const usedAbi = parseAbi(['event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)'])

export interface AuthorizationUse {
  hash: Hash
  blockNumber: bigint
  /** Its place among the authorizations that transaction used, and how many it used. */
  index: number
  count: number
}

/**
 * Looks back from the head in chunks of `chunk` blocks, at most `maxChunks` of them (the use is recent: the
 * authorization was unused when it was captured). null: not found that far back. A failed RPC call throws.
 */
export async function findAuthorizationUse(
  client: Client,
  q: { usdc: Address; authorizer: Address; nonce: Hex; chunk: bigint; maxChunks: number },
): Promise<AuthorizationUse | null> {
  let to = await getBlockNumber(client, { cacheTime: 0 })
  for (let i = 0; i < q.maxChunks && to >= 0n; i++) {
    const from = to - q.chunk + 1n > 0n ? to - q.chunk + 1n : 0n
    const logs = await getLogs(client, {
      address: q.usdc,
      event: authorizationUsed,
      args: { authorizer: q.authorizer, nonce: q.nonce },
      fromBlock: from,
      toBlock: to,
    })
    const log = logs[0]
    if (log?.transactionHash && log.blockNumber !== null) {
      const receipt = await getTransactionReceipt(client, { hash: log.transactionHash })
      const used = parseEventLogs({ abi: usedAbi, logs: receipt.logs }).filter(
        (l) => l.address.toLowerCase() === q.usdc.toLowerCase(),
      )
      const index = used.findIndex((l) => l.logIndex === log.logIndex)
      return {
        hash: log.transactionHash,
        blockNumber: log.blockNumber,
        index: Math.max(0, index),
        count: Math.max(1, used.length),
      }
    }
    if (from === 0n) break
    to = from - 1n
  }
  return null
}
