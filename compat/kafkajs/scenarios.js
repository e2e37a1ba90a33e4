// kafkajs scenarios against one broker or cluster: each test asserts what Kafka answers.
//
//   node scenarios.js BOOTSTRAP NODES RESULTS.jsonl [test-id ...]
//
// On a secure target KAFKAJS_SECURITY is a JSON object from runner.py: {protocol (SASL_SSL or
// SSL), ca, cert, key (PEM paths), mechanism, username, password}; every client trusts the CA,
// shows its certificate when it has one and logs in with SCRAM when a mechanism is given.
// Appends one JSON line per test to RESULTS.jsonl: {"test", "outcome", "error", "ms"}.
// Every test is bounded by TEST_TIMEOUT_MS; a test that times out is failed and the run goes
// on; the process exits when the last test is done (hung clients do not keep it alive).
'use strict'

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const { Kafka, logLevel, Partitioners } = require('kafkajs')

const [BOOTSTRAP, NODES_ARG, RESULTS, ...ONLY] = process.argv.slice(2)
const NODES = Number(NODES_ARG)
const RF = Math.min(NODES, 3)
const TEST_TIMEOUT_MS = Number(process.env.TEST_TIMEOUT_MS || 90000)

// kafkajs's ssl / sasl options for a secure target ({} on a plaintext one)
function security () {
  if (!process.env.KAFKAJS_SECURITY) return {}
  const s = JSON.parse(process.env.KAFKAJS_SECURITY)
  const ssl = { ca: [fs.readFileSync(s.ca, 'utf-8')] }
  if (s.cert) Object.assign(ssl, { cert: fs.readFileSync(s.cert, 'utf-8'), key: fs.readFileSync(s.key, 'utf-8') })
  const conf = { ssl }
  if (s.mechanism) conf.sasl = { mechanism: s.mechanism.toLowerCase(), username: s.username, password: s.password }
  return conf
}

const kafka = new Kafka({
  clientId: 'kbroker-compat',
  brokers: BOOTSTRAP.split(','),
  logLevel: logLevel.ERROR,
  retry: { retries: 8, initialRetryTime: 200 },
  ...security(),
})
const toClose = [] // clients a test opened, disconnected after it (even when it fails)

function uid (prefix) { return `${prefix}-${crypto.randomBytes(5).toString('hex')}` }
function sleep (ms) { return new Promise(resolve => setTimeout(resolve, ms)) }

function open (client) { toClose.push(client); return client }
function admin () { return open(kafka.admin()) }
function producer (opts = {}) {
  return open(kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, ...opts }))
}
function consumer (opts) { return open(kafka.consumer({ maxWaitTimeInMs: 500, ...opts })) }

async function createTopic (a, partitions = 3, configEntries = []) {
  const topic = uid('kjs')
  const created = await a.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: partitions, replicationFactor: RF, configEntries }],
  })
  assert.equal(created, true)
  return topic
}

async function until (what, fn, ms = 30000) {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(200)
  }
}

// Consumes `topic` from the beginning in a fresh group until `n` messages arrived, then waits
// `settleMs` more so that extra (duplicate or aborted) messages would be seen too.
async function consumeAll (topic, n, opts = {}, settleMs = 1500) {
  const c = consumer({ groupId: uid('kjs-read'), ...opts })
  const got = []
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  await c.run({ eachMessage: async ({ partition, message }) => { got.push({ partition, ...message }) } })
  await until(`${n} messages from ${topic} (have ${got.length})`, () => got.length >= n, 60000)
  await sleep(settleMs)
  await c.disconnect()
  return got
}

function values (messages) { return messages.map(m => m.value.toString()).sort() }

async function endOffsets (a, topic) {
  const offsets = await a.fetchTopicOffsets(topic)
  return Object.fromEntries(offsets.map(o => [o.partition, o.high]))
}

// ---- tests -------------------------------------------------------------------------------

const tests = {}

tests.bootstrap_metadata = async () => {
  const a = admin()
  await a.connect()
  const cluster = await a.describeCluster()
  assert.equal(cluster.brokers.length, NODES)
  assert.ok(cluster.brokers.some(b => b.nodeId === cluster.controller), 'controller is a broker')
  const topic = await createTopic(a, 3)
  const { topics } = await a.fetchTopicMetadata({ topics: [topic] })
  assert.equal(topics[0].name, topic)
  assert.equal(topics[0].partitions.length, 3)
  for (const p of topics[0].partitions) {
    assert.equal(p.partitionErrorCode, 0)
    assert.equal(p.replicas.length, RF)
    assert.deepEqual([...p.isr].sort(), [...p.replicas].sort())
  }
  assert.ok((await a.listTopics()).includes(topic))
}

tests.produce_consume_roundtrip = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 3)
  const p = producer()
  await p.connect()
  const messages = Array.from({ length: 60 }, (_, i) => ({
    key: `k${i % 7}`, value: `v${i}`, headers: { n: String(i) },
  }))
  const sent = await p.send({ topic, acks: -1, messages })
  assert.ok(sent.length >= 1 && sent.every(r => r.errorCode === 0))
  const got = await consumeAll(topic, 60)
  assert.equal(got.length, 60)
  for (const m of got) {
    const i = Number(m.value.toString().slice(1))
    assert.equal(m.key.toString(), `k${i % 7}`)
    assert.equal(m.headers.n.toString(), String(i))
  }
  // the same key always lands on the same partition, in send order
  const byKey = {}
  for (const m of got) (byKey[m.key] ||= new Set()).add(m.partition)
  assert.ok(Object.values(byKey).every(s => s.size === 1))
}

tests.consumer_group_two_members = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 4)
  const groupId = uid('kjs-group')
  const assigned = {}
  const seen = []
  const member = async (name) => {
    const c = consumer({ groupId, heartbeatInterval: 500, sessionTimeout: 10000, rebalanceTimeout: 10000 })
    c.on(c.events.GROUP_JOIN, e => { assigned[name] = e.payload.memberAssignment[topic] || [] })
    await c.connect()
    await c.subscribe({ topic, fromBeginning: true })
    await c.run({ eachMessage: async ({ partition, message }) => { seen.push([name, partition, message.value.toString()]) } })
    return c
  }
  const first = await member('a')
  await until('member a owns all 4 partitions', () => (assigned.a || []).length === 4)
  await member('b')
  await until('both members share the partitions', () =>
    (assigned.a || []).length + (assigned.b || []).length === 4 &&
    (assigned.a || []).length > 0 && (assigned.b || []).length > 0)
  assert.deepEqual([...assigned.a, ...assigned.b].sort(), [0, 1, 2, 3])
  const p = producer()
  await p.connect()
  await p.send({ topic, messages: Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, value: `m${i}` })) })
  await until('40 messages consumed', () => seen.length >= 40)
  await sleep(1000)
  assert.equal(seen.length, 40, 'each message consumed once')
  for (const [name, partition] of seen) assert.ok(assigned[name].includes(partition))
  await until('committed offsets reach the end', async () => {
    const [committed] = await a.fetchOffsets({ groupId, topics: [topic] })
    const ends = await endOffsets(a, topic)
    return committed.partitions.every(p => Number(p.offset) === Number(ends[p.partition]))
  })
  await first.disconnect() // the other member takes every partition
  await until('member b owns all 4 partitions', () => (assigned.b || []).length === 4)
  const groups = await a.describeGroups([groupId])
  assert.equal(groups.groups[0].state, 'Stable')
  assert.equal(groups.groups[0].members.length, 1)
}

tests.idempotent_producer = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 3)
  const p = producer({ idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  for (let batch = 0; batch < 5; batch++) {
    await p.send({ topic, acks: -1, messages: Array.from({ length: 20 }, (_, i) => ({ key: `k${i}`, value: `b${batch}-${i}` })) })
  }
  const got = await consumeAll(topic, 100)
  assert.equal(got.length, 100)
  assert.equal(new Set(values(got)).size, 100, 'no duplicates')
  const ends = await endOffsets(a, topic)
  assert.equal(Object.values(ends).reduce((s, o) => s + Number(o), 0), 100)
}

// Commits one transaction, aborts one, commits one; returns the topic.
async function threeTransactions () {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 2)
  const p = producer({ transactionalId: uid('kjs-tx'), idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  for (const [name, commit] of [['a', true], ['b', false], ['c', true]]) {
    const tx = await p.transaction()
    await tx.send({ topic, messages: [0, 1, 2, 3].map(i => ({ key: `k${i}`, value: `${name}${i}` })) })
    await (commit ? tx.commit() : tx.abort())
  }
  return topic
}

tests.transaction_commit = async () => {
  // one transaction over both partitions: read_committed sees it all once it commits, and
  // each partition it touched holds one commit marker after the records
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 2)
  const p = producer({ transactionalId: uid('kjs-tx'), idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  const tx = await p.transaction()
  await tx.send({ topic, messages: Array.from({ length: 8 }, (_, i) => ({ key: `k${i}`, value: `t${i}` })) })
  await tx.commit()
  const got = await consumeAll(topic, 8, { readUncommitted: false })
  assert.deepEqual(values(got), Array.from({ length: 8 }, (_, i) => `t${i}`))
  const touched = new Set(got.map(m => m.partition)).size
  const ends = await endOffsets(a, topic)
  assert.equal(Object.values(ends).reduce((s, o) => s + Number(o), 0), 8 + touched)
}

tests.transaction_abort_read_committed = async () => {
  const topic = await threeTransactions()
  const committed = await consumeAll(topic, 8, { readUncommitted: false })
  assert.deepEqual(values(committed), ['a0', 'a1', 'a2', 'a3', 'c0', 'c1', 'c2', 'c3'])
  const everything = await consumeAll(topic, 12, { readUncommitted: true })
  assert.deepEqual(values(everything), ['a0', 'a1', 'a2', 'a3', 'b0', 'b1', 'b2', 'b3', 'c0', 'c1', 'c2', 'c3'])
}

tests.transaction_send_offsets = async () => {
  // consume-transform-produce: each input batch's output and offsets commit in one transaction
  const a = admin()
  await a.connect()
  const input = await createTopic(a, 2)
  const output = await createTopic(a, 2)
  const plain = producer()
  await plain.connect()
  await plain.send({ topic: input, messages: Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `in${i}` })) })
  const groupId = uid('kjs-ctp')
  const tp = producer({ transactionalId: uid('kjs-ctp-tx'), idempotent: true, maxInFlightRequests: 1 })
  await tp.connect()
  const c = consumer({ groupId, readUncommitted: false })
  await c.connect()
  await c.subscribe({ topic: input, fromBeginning: true })
  let done = 0
  await c.run({
    autoCommit: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      const tx = await tp.transaction()
      await tx.send({ topic: output, messages: batch.messages.map(m => ({ key: m.key, value: `out-${m.value}` })) })
      const last = batch.messages[batch.messages.length - 1].offset
      await tx.sendOffsets({
        consumerGroupId: groupId,
        topics: [{ topic: input, partitions: [{ partition: batch.partition, offset: String(Number(last) + 1) }] }],
      })
      await tx.commit()
      for (const m of batch.messages) resolveOffset(m.offset)
      done += batch.messages.length
    },
  })
  await until('30 input messages transformed', () => done >= 30, 60000)
  await c.disconnect()
  const [committed] = await a.fetchOffsets({ groupId, topics: [input] })
  const ends = await endOffsets(a, input)
  for (const p of committed.partitions) assert.equal(Number(p.offset), Number(ends[p.partition]))
  const out = await consumeAll(output, 30, { readUncommitted: false })
  assert.deepEqual(values(out), Array.from({ length: 30 }, (_, i) => `out-in${i}`).sort())
}

tests.admin_create_topics = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 2)
  const again = await a.createTopics({ topics: [{ topic, numPartitions: 2, replicationFactor: RF }] })
  assert.equal(again, false, 'creating an existing topic reports false')
  await a.createPartitions({ topicPartitions: [{ topic, count: 5 }] })
  await until('5 partitions', async () => (await a.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length === 5)
  await a.deleteTopics({ topics: [topic], timeout: 15000 })
  await until('topic deleted', async () => !(await a.listTopics()).includes(topic))
}

tests.admin_fetch_topic_metadata = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 4)
  const { topics } = await a.fetchTopicMetadata({ topics: [topic] })
  assert.deepEqual(topics[0].partitions.map(p => p.partitionId).sort(), [0, 1, 2, 3])
  const all = await a.fetchTopicMetadata()
  assert.ok(all.topics.some(t => t.name === topic))
}

tests.admin_describe_configs = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 1, [{ name: 'retention.ms', value: '123456' }])
  const { resources } = await a.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: 2 /* TOPIC */, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }],
  })
  assert.equal(resources[0].errorCode, 0)
  const byName = Object.fromEntries(resources[0].configEntries.map(e => [e.configName, e.configValue]))
  assert.equal(byName['retention.ms'], '123456')
  assert.equal(byName['cleanup.policy'], 'delete')
  const cluster = await a.describeCluster()
  const broker = await a.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: 4 /* BROKER */, name: String(cluster.brokers[0].nodeId) }],
  })
  assert.equal(broker.resources[0].errorCode, 0)
  assert.ok(broker.resources[0].configEntries.length > 0)
}

tests.admin_alter_configs = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 1)
  await a.alterConfigs({
    validateOnly: false,
    resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '7654321' }] }],
  })
  // any broker answers DescribeConfigs; on a cluster each applies the change a little later
  const described = async () => (await a.describeConfigs({
    includeSynonyms: false, resources: [{ type: 2, name: topic, configNames: ['retention.ms'] }],
  })).resources[0].configEntries[0].configValue
  await until('retention.ms described as 7654321', async () => (await described()) === '7654321', 15000)
}

// A group that consumed `n` messages of a new topic and committed, with no member left.
async function idleGroup (a, n = 10) {
  const topic = await createTopic(a, 2)
  const p = producer()
  await p.connect()
  await p.send({ topic, messages: Array.from({ length: n }, (_, i) => ({ key: `k${i}`, value: `v${i}` })) })
  const groupId = uid('kjs-idle')
  const c = consumer({ groupId })
  let got = 0
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  await c.run({ eachMessage: async () => { got++ } })
  await until(`${n} messages`, () => got >= n)
  await c.disconnect() // commits what it consumed and leaves the group
  return { topic, groupId }
}

tests.admin_fetch_offsets = async () => {
  const a = admin()
  await a.connect()
  const { topic, groupId } = await idleGroup(a, 10)
  const [committed] = await a.fetchOffsets({ groupId, topics: [topic] })
  assert.equal(committed.topic, topic)
  const total = committed.partitions.reduce((s, p) => s + Number(p.offset), 0)
  assert.equal(total, 10)
}

tests.admin_reset_offsets = async () => {
  const a = admin()
  await a.connect()
  const { topic, groupId } = await idleGroup(a, 10)
  await a.resetOffsets({ groupId, topic, earliest: true }) // commits -2, resolved on fetch
  const [reset] = await a.fetchOffsets({ groupId, topics: [topic], resolveOffsets: true })
  assert.ok(reset.partitions.every(p => Number(p.offset) === 0), JSON.stringify(reset))
  await a.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: '1' }] })
  const [set] = await a.fetchOffsets({ groupId, topics: [topic] })
  assert.equal(set.partitions.find(p => p.partition === 0).offset, '1')
}

tests.admin_list_describe_groups = async () => {
  const a = admin()
  await a.connect()
  const { groupId } = await idleGroup(a, 4)
  const { groups } = await a.listGroups()
  const listed = groups.find(g => g.groupId === groupId)
  assert.ok(listed, 'listGroups lists the group')
  assert.equal(listed.protocolType, 'consumer')
  const described = await a.describeGroups([groupId])
  assert.equal(described.groups[0].groupId, groupId)
  assert.equal(described.groups[0].state, 'Empty')
  assert.equal(described.groups[0].errorCode, 0)
}

tests.admin_delete_groups = async () => {
  const a = admin()
  await a.connect()
  const { groupId } = await idleGroup(a, 4)
  const [deleted] = await a.deleteGroups([groupId])
  assert.equal(deleted.groupId, groupId)
  assert.equal(deleted.errorCode, 0)
  const { groups } = await a.listGroups()
  assert.ok(!groups.some(g => g.groupId === groupId), 'deleted group is not listed')
}

tests.admin_delete_topic_records = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 1)
  const p = producer()
  await p.connect()
  await p.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ value: `r${i}` })) })
  await a.fetchTopicMetadata({ topics: [topic] }) // deleteTopicRecords reads leaders from this cache
  try {
    await a.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '6' }] })
  } catch (e) { // the per-partition broker errors are in e.partitions
    throw new Error(`${e.message}: ${JSON.stringify(e.partitions)}`)
  }
  const [offsets] = await a.fetchTopicOffsets(topic)
  assert.equal(offsets.low, '6')
  assert.equal(offsets.high, '10')
  const got = await consumeAll(topic, 4)
  assert.deepEqual(values(got), ['r6', 'r7', 'r8', 'r9'])
}

tests.admin_fetch_offsets_by_timestamp = async () => {
  const a = admin()
  await a.connect()
  const topic = await createTopic(a, 1)
  const p = producer()
  await p.connect()
  const t0 = Date.now()
  await p.send({ topic, messages: [0, 1, 2].map(i => ({ value: `old${i}`, timestamp: String(t0 - 60000) })) })
  await p.send({ topic, messages: [0, 1].map(i => ({ value: `new${i}`, timestamp: String(t0) })) })
  const [byTime] = await a.fetchTopicOffsetsByTimestamp(topic, t0 - 1000)
  assert.equal(byTime.offset, '3')
}

// ---- runner ------------------------------------------------------------------------------

async function closeAll () {
  const clients = toClose.splice(0)
  await Promise.allSettled(clients.map(c => Promise.race([c.disconnect(), sleep(5000)])))
}

async function runOne (name) {
  const start = Date.now()
  let timer
  const timeout = new Promise((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${TEST_TIMEOUT_MS} ms`)), TEST_TIMEOUT_MS)
  })
  let outcome = 'passed'
  let error
  try {
    await Promise.race([tests[name](), timeout])
  } catch (e) {
    outcome = 'failed'
    error = `${e && e.name}: ${e && e.message}`.slice(0, 2000)
  } finally {
    clearTimeout(timer)
    await closeAll()
  }
  fs.appendFileSync(RESULTS, JSON.stringify({ test: name, outcome, error, ms: Date.now() - start }) + '\n')
}

async function main () {
  const names = ONLY.length ? ONLY : Object.keys(tests)
  for (const name of names) await runOne(name)
  process.exit(0)
}

process.on('unhandledRejection', e => { process.stderr.write(`unhandled rejection: ${e && e.stack}\n`) })
main()
