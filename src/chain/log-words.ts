// Reading the fixed-shape events of our own settlements by hand: the topics and data words of a log, with
// the checks viem's strict decoding makes (an indexed address's 12 zero bytes, the data's exact length), so
// a malformed log is skipped, never read as money that moved. viem's generic parseEventLogs cost ~60–90 µs
// of the leader's CPU per settled x402 authorization or upto permit in the bench profiles.
import type { Hex } from 'viem'

const ADDRESS_TOPIC = /^0x0{24}[0-9a-fA-F]{40}$/
const WORD = /^0x[0-9a-fA-F]{64}$/

/** A log's event selector (topic 0), lower-case, for comparison with toEventSelector's. */
export function eventTopic(topics: readonly Hex[]): string | undefined {
  return topics[0]?.toLowerCase()
}

/** An indexed address, lower-case, or null when the topic is not one. */
export function topicAddress(topic: Hex | undefined): string | null {
  return topic !== undefined && ADDRESS_TOPIC.test(topic) ? `0x${topic.slice(26).toLowerCase()}` : null
}

/** An indexed 32-byte word as a number, or null. */
export function topicWord(topic: Hex | undefined): bigint | null {
  return topic !== undefined && WORD.test(topic) ? BigInt(topic) : null
}

/** The log's data as exactly `count` 32-byte words, or null when it is anything else. */
export function dataWords(data: Hex, count: number): bigint[] | null {
  if (data.length !== 2 + 64 * count || !/^0x[0-9a-fA-F]*$/.test(data)) return null
  const words: bigint[] = []
  for (let i = 0; i < count; i++) words.push(BigInt(`0x${data.slice(2 + 64 * i, 66 + 64 * i)}`))
  return words
}
