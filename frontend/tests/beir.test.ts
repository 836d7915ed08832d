/**
 * Labelled questions read in the browser: BEIR sets (queries, qrels, corpus) and question lists (CSV,
 * JSONL) become the run's queries; each malformed line is reported with its number; the server's
 * limits are checked before anything is sent; a corpus becomes one text file per entry.
 */
import { describe, expect, it } from 'vitest'

import {
  assignBeirFiles,
  beirEvaluationSet,
  corpusFile,
  csvRecords,
  labelsMissingFromCorpus,
  parseCorpusJsonl,
  parseQrelsTsv,
  parseQueriesJsonl,
  parseQuestionList,
  QUESTION_LIST_EXAMPLES,
} from '../src/lib/beir'
import { EVALUATION_LIMITS } from '../src/lib/evaluationApi'

const queries = (...lines: unknown[]) => lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')
const beir = (q: string, qrels: string) => beirEvaluationSet({ name: 'queries.jsonl', text: q }, { name: 'test.tsv', text: qrels })

describe('BEIR sets', () => {
  it('make a query of each question with relevant judgements, its labels the judged corpus ids', () => {
    const set = beir(
      queries({ _id: 'q1', text: 'What is RRF?', metadata: {} }, { _id: 'q2', text: 'How are chunks made?' }, { _id: 'q3', text: 'Unjudged' }),
      'query-id\tcorpus-id\tscore\nq1\tdoc-a\t2\nq1\tdoc-b\t1\nq2\tdoc-c\t1\nq2\tdoc-d\t0\n',
    )
    expect(set.errors).toEqual([])
    expect(set.queries).toEqual([
      { id: 'q1', text: 'What is RRF?', relevant: { 'doc-a': 2, 'doc-b': 1 } },
      { id: 'q2', text: 'How are chunks made?', relevant: { 'doc-c': 1 } },
    ])
    expect(set.leftOut).toBe(1) // q3 has no judgement
    expect(set.zeroGrades).toBe(1) // doc-d judged not relevant: left out
  })

  it('take qrels without a header line, with CRLF line ends and a byte-order mark', () => {
    const set = beir('\uFEFF{"_id": 7, "text": "numeric id"}\r\n', '7\tdoc-1\t1\r\n')
    expect(set.errors).toEqual([])
    expect(set.queries).toEqual([{ id: '7', text: 'numeric id', relevant: { 'doc-1': 1 } }])
  })

  it('name the file and line of every malformed line', () => {
    const parsedQueries = parseQueriesJsonl(queries({ _id: 'q1', text: 'ok' }, 'not json', { text: 'no id' }, '', { _id: 'q1', text: 'again' }, [1, 2]))
    expect(parsedQueries.errors).toEqual([
      { file: 'queries.jsonl', line: 2, code: 'invalid_json' },
      { file: 'queries.jsonl', line: 3, code: 'missing_field', params: { field: '_id' } },
      { file: 'queries.jsonl', line: 5, code: 'duplicate_id', params: { id: 'q1', first: 1 } },
      { file: 'queries.jsonl', line: 6, code: 'invalid_json' },
    ])

    const parsedQrels = parseQrelsTsv('query-id\tcorpus-id\tscore\nq1 doc-a 1\nq1\tdoc-a\t-1\nq1\tdoc-b\t2.5\nq1\t\t1\nq1\tdoc-c\t101\n', 'test.tsv')
    expect(parsedQrels.judgements).toEqual([])
    expect(parsedQrels.errors.map((e) => [e.line, e.code])).toEqual([
      [2, 'bad_columns'],
      [3, 'bad_grade'],
      [4, 'bad_grade'],
      [5, 'empty_label'],
      [6, 'bad_grade'],
    ])
    expect(parsedQrels.errors[0].params).toEqual({ count: 1, expected: 3 })
  })

  it('refuse judgements of unknown questions and the same judgement twice', () => {
    const set = beir(queries({ _id: 'q1', text: 'one' }), 'q1\tdoc-a\t1\nq9\tdoc-a\t1\nq1\tdoc-a\t2\n')
    expect(set.errors).toEqual([
      { file: 'test.tsv', line: 2, code: 'unknown_query', params: { id: 'q9' } },
      { file: 'test.tsv', line: 3, code: 'duplicate_judgement', params: { id: 'q1', label: 'doc-a', first: 1 } },
    ])
  })

  it('say so when no question has a relevant document, or a file is empty', () => {
    expect(beir(queries({ _id: 'q1', text: 'one' }), 'q1\tdoc-a\t0\n').errors).toEqual([{ file: 'test.tsv', line: 0, code: 'no_queries' }])
    expect(beir('\n\n', 'q1\tdoc-a\t1\n').errors.map((e) => [e.file, e.code])).toEqual([
      ['queries.jsonl', 'empty_file'],
      ['test.tsv', 'unknown_query'],
    ])
    expect(parseQrelsTsv('  \n').errors).toEqual([{ file: 'qrels.tsv', line: 0, code: 'empty_file' }])
  })
})

describe('the server limits', () => {
  it('cap the questions of a run', () => {
    const count = EVALUATION_LIMITS.maxQueries + 1
    const q = Array.from({ length: count }, (_, i) => JSON.stringify({ _id: `q${i}`, text: `question ${i}` })).join('\n')
    const qrels = Array.from({ length: count }, (_, i) => `q${i}\tdoc\t1`).join('\n')
    const set = beir(q, qrels)
    expect(set.errors).toEqual([{ file: 'test.tsv', line: 0, code: 'too_many_queries', params: { count, limit: EVALUATION_LIMITS.maxQueries } }])
    expect(beir(q.split('\n').slice(0, -1).join('\n'), qrels.split('\n').slice(0, -1).join('\n')).errors).toEqual([])
  })

  it('cap an id’s length and the relevant documents of a question, at the line that breaks them', () => {
    const longId = 'x'.repeat(EVALUATION_LIMITS.maxQueryIdChars + 1)
    const labels = EVALUATION_LIMITS.maxLabelsPerQuery
    const qrels = [`${longId}\tdoc\t1`, ...Array.from({ length: labels + 1 }, (_, i) => `q2\tdoc-${i}\t1`)].join('\n')
    const set = beir(queries({ _id: longId, text: 'long id' }, { _id: 'q2', text: 'many labels' }), qrels)
    expect(set.errors).toEqual([
      { file: 'queries.jsonl', line: 1, code: 'id_too_long', params: { id: `${'x'.repeat(40)}…`, limit: EVALUATION_LIMITS.maxQueryIdChars } },
      { file: 'test.tsv', line: labels + 2, code: 'too_many_labels', params: { id: 'q2', count: labels + 1, limit: labels } },
    ])
    expect(set.queries).toEqual([])
  })

  it('refuse an empty question and one longer than a search takes', () => {
    const set = beir(queries({ _id: 'q1', text: '  ' }, { _id: 'q2', text: 'y'.repeat(4001) }), 'q1\td\t1\nq2\td\t1')
    expect(set.errors.map((e) => [e.line, e.code])).toEqual([
      [1, 'empty_text'],
      [2, 'text_too_long'],
    ])
  })

  it('take grades from 0 to 100 only', () => {
    expect(parseQrelsTsv('q\td\t100\nq\te\t2.0\n').judgements.map((j) => j.grade)).toEqual([100, 2])
    const set = parseQuestionList('{"question": "q", "relevant": {"a.pdf": 101}}', 'list.jsonl')
    expect(set.errors).toEqual([{ file: 'list.jsonl', line: 1, code: 'bad_grade', params: { value: 'a.pdf: 101' } }])
  })
})

describe('a corpus', () => {
  it('becomes one text file per entry named after its id: title, blank line, text', async () => {
    const parsed = parseCorpusJsonl(
      queries(
        { _id: 'doc-1', title: 'Fusion', text: 'RRF adds 1/(k+rank).' },
        { _id: 'doc.2', title: '', text: 'Only text.' },
        { _id: 'doc-3', title: '', text: '' },
        { _id: 'a/b', title: 't', text: 'x' },
        { _id: 'doc-1', title: 'again', text: 'x' },
      ),
    )
    expect(parsed.errors).toEqual([
      { file: 'corpus.jsonl', line: 4, code: 'bad_file_name', params: { id: 'a/b', limit: 251 } },
      { file: 'corpus.jsonl', line: 5, code: 'duplicate_id', params: { id: 'doc-1', first: 1 } },
    ])
    expect(parsed.empty).toEqual([3])
    const files = parsed.entries.map(corpusFile)
    expect(files.map((f) => f.name)).toEqual(['doc-1.txt', 'doc.2.txt'])
    expect(files[0].type).toBe('text/plain')
    expect(await files[0].text()).toBe('Fusion\n\nRRF adds 1/(k+rank).')
    expect(await files[1].text()).toBe('Only text.')
  })

  it('is checked against the labels the judgements use', () => {
    const set = beir(queries({ _id: 'q1', text: 'one' }), 'q1\tdoc-1\t1\nq1\tdoc-9\t1\n')
    expect(labelsMissingFromCorpus(set.queries, parseCorpusJsonl(queries({ _id: 'doc-1', title: 't', text: 'x' })).entries)).toBe(1)
  })

  it('comes with the other files of a dropped folder, each taken by its name', () => {
    const files = ['corpus.jsonl', 'queries.jsonl', 'train.tsv', 'test.tsv', 'README.md'].map((name) => ({ name }))
    expect(assignBeirFiles(files)).toEqual({ queries: { name: 'queries.jsonl' }, corpus: { name: 'corpus.jsonl' }, qrels: { name: 'test.tsv' } })
    expect(assignBeirFiles([{ name: 'dev.tsv' }]).qrels).toEqual({ name: 'dev.tsv' })
  })
})

describe('question lists', () => {
  it('read the CSV example: quoted commas, several documents separated by semicolons, ids optional', () => {
    const set = parseQuestionList(QUESTION_LIST_EXAMPLES.csv, 'questions.csv')
    expect(set.errors).toEqual([])
    expect(set.queries).toEqual([
      { id: 'q1', text: 'How do I reset my password?', relevant: { 'account-guide.pdf': 1 } },
      { id: 'q2', text: 'Which plans include SSO, and at what price?', relevant: { 'pricing.md': 1, 'security-faq': 1 } },
    ])
    const numbered = parseQuestionList('Question,Relevant\n"Say ""hi""",a.md\nSecond,b.md ; c.md\n', 'q.csv')
    expect(numbered.queries).toEqual([
      { id: 'q1', text: 'Say "hi"', relevant: { 'a.md': 1 } },
      { id: 'q2', text: 'Second', relevant: { 'b.md': 1, 'c.md': 1 } },
    ])
  })

  it('read the JSONL example: a list of documents, or documents with grades', () => {
    const set = parseQuestionList(QUESTION_LIST_EXAMPLES.jsonl, 'questions.jsonl')
    expect(set.errors).toEqual([])
    expect(set.queries).toEqual([
      { id: 'q1', text: 'How do I reset my password?', relevant: { 'account-guide.pdf': 1 } },
      { id: 'q2', text: 'Which plans include SSO?', relevant: { 'pricing.md': 2, 'security-faq': 1 } },
    ])
    // The run's own query shape ({"id", "text", "relevant"}) reads too.
    expect(parseQuestionList('{"id": "x", "text": "t", "relevant": {"d": 3}}', 'run.json').queries).toEqual([{ id: 'x', text: 't', relevant: { d: 3 } }])
  })

  it('report CSV faults by the line a record starts on, quoted line breaks counted', () => {
    const text = 'id,question,relevant\nq1,"two\nlines",a.md\nq2,no documents,\nq1,again,b.md\nq3,too,many,columns\n'
    const set = parseQuestionList(text, 'q.csv')
    expect(set.queries).toEqual([{ id: 'q1', text: 'two\nlines', relevant: { 'a.md': 1 } }])
    expect(set.errors).toEqual([
      { file: 'q.csv', line: 4, code: 'no_relevant', params: { id: 'q2' } },
      { file: 'q.csv', line: 5, code: 'duplicate_id', params: { id: 'q1', first: 2 } },
      { file: 'q.csv', line: 6, code: 'bad_columns', params: { count: 4, expected: 3 } },
    ])
  })

  it('name a missing column and a quote that never closes', () => {
    expect(parseQuestionList('id,question\nq1,hello\n', 'q.csv').errors).toEqual([
      { file: 'q.csv', line: 1, code: 'missing_column', params: { column: 'relevant' } },
    ])
    expect(csvRecords('a,b\n1,"open\n2,3\n').unclosed).toBe(2)
    expect(parseQuestionList('question,relevant\nq,"a.md\n', 'q.csv').errors[0]).toEqual({ file: 'q.csv', line: 2, code: 'unclosed_quote' })
  })

  it('report JSONL faults by line', () => {
    const text = ['{"question": "ok", "relevant": ["a"]}', '{"question": "no relevant"}', '{"relevant": ["a"]}', '{oops', '{"question": "q", "relevant": [1]}'].join('\n')
    expect(parseQuestionList(text, 'q.jsonl').errors).toEqual([
      { file: 'q.jsonl', line: 2, code: 'missing_field', params: { field: 'relevant' } },
      { file: 'q.jsonl', line: 3, code: 'missing_field', params: { field: 'question' } },
      { file: 'q.jsonl', line: 4, code: 'invalid_json' },
      { file: 'q.jsonl', line: 5, code: 'missing_field', params: { field: 'relevant' } },
    ])
  })

  it('tell the format by the content when the extension does not', () => {
    expect(parseQuestionList('{"question": "q", "relevant": ["a"]}', 'questions.txt').queries).toHaveLength(1)
    expect(parseQuestionList('question,relevant\nq,a\n', 'questions.txt').queries).toHaveLength(1)
  })
})
