//! BM25 over tantivy: one in-RAM index per workspace, an English stemming
//! analyzer, and queries built from term clauses (user text never reaches
//! tantivy's query parser, so `?`, quotes and apostrophes are just text).

use std::collections::HashSet;
use std::sync::Arc;

use tantivy::collector::{FilterCollector, TopDocs};
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::SearchResultOf;

/// The most distinct terms a query contributes to the boolean query: past
/// that, more terms add cost and no ranking signal.
pub(crate) const MAX_QUERY_TERMS: usize = 256;

const ANALYZER: &str = "cairn_en_stem";

/// Query-side stopwords (the study's list; documents keep every word).
const STOPWORDS: &str = "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it its itself they them their theirs themselves what which who whom this that these those am is are was were be been being have has had having do does did doing a an the and but if or because as until while of at by for with about against between into through during before after above below to from up down in out on off over under again further then once here there when where why how all any both each few more most other some such no nor not only own same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn would could also";

fn stemming() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build()
}

fn plain() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .build()
}

fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// The BM25 side of a workspace's search index.
pub(crate) struct LexicalIndex {
    writer: IndexWriter,
    reader: IndexReader,
    text: Field,
    doc: Field,
    stopwords: HashSet<&'static str>,
    /// Additions and deletions since the last commit.
    pending: usize,
}

impl LexicalIndex {
    pub(crate) fn new() -> SearchResultOf<Self> {
        let mut schema = Schema::builder();
        // Term frequencies only: BM25 needs no positions (no phrase query is
        // ever built), and the document number is read from its fast field,
        // so nothing is stored: less to write on every turn and to merge.
        let indexing = TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs);
        let text = schema.add_text_field(
            "text",
            TextOptions::default().set_indexing_options(indexing),
        );
        let doc = schema.add_u64_field("doc", INDEXED | FAST);
        let index = Index::create_in_ram(schema.build());
        index.tokenizers().register(ANALYZER, stemming());
        let writer = index.writer_with_num_threads(1, 15_000_000)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(LexicalIndex {
            writer,
            reader,
            text,
            doc,
            stopwords: STOPWORDS.split_whitespace().collect(),
            pending: 0,
        })
    }

    /// Adds a document under the internal number `doc`.
    pub(crate) fn add(&mut self, doc: u64, text: &str) -> SearchResultOf<()> {
        let mut d = TantivyDocument::default();
        d.add_text(self.text, text);
        d.add_u64(self.doc, doc);
        self.writer.add_document(d)?;
        self.pending += 1;
        Ok(())
    }

    /// Removes a document.
    pub(crate) fn delete(&mut self, doc: u64) {
        self.writer.delete_term(Term::from_field_u64(self.doc, doc));
        self.pending += 1;
    }

    /// Makes pending changes searchable.
    pub(crate) fn commit(&mut self) -> SearchResultOf<()> {
        if self.pending > 0 {
            self.writer.commit()?;
            self.reader.reload()?;
            self.pending = 0;
        }
        Ok(())
    }

    /// Additions and deletions not committed yet.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// How many segments the searchable index has (each commit writes one;
    /// merges join them).
    #[cfg(test)]
    pub(crate) fn segments(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }

    /// Whether `word` (lower-case) is one of the query-side stopwords.
    pub(crate) fn is_stopword(&self, word: &str) -> bool {
        self.stopwords.contains(word)
    }

    /// The query terms: analysed like documents, stopwords dropped before
    /// stemming, de-duplicated, at most [`MAX_QUERY_TERMS`].
    pub(crate) fn query_terms(&self, query: &str) -> Vec<String> {
        let mut stem = stemming();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for word in tokens(&mut plain(), query) {
            if self.stopwords.contains(word.as_str()) {
                continue;
            }
            for term in tokens(&mut stem, &word) {
                if out.len() >= MAX_QUERY_TERMS {
                    return out;
                }
                if seen.insert(term.clone()) {
                    out.push(term);
                }
            }
        }
        out
    }

    /// Top `n` documents by BM25, best first: `(doc, score)`; with
    /// `allowed`, only documents whose number is `true` in it.
    pub(crate) fn search(
        &self,
        query: &str,
        n: usize,
        allowed: Option<Arc<Vec<bool>>>,
    ) -> SearchResultOf<Vec<(u64, f32)>> {
        self.search_terms(&self.query_terms(query), n, allowed)
    }

    /// How many live documents hold an analysed term.
    pub(crate) fn doc_freq(&self, term: &str) -> u64 {
        self.reader
            .searcher()
            .doc_freq(&Term::from_field_text(self.text, term))
            .unwrap_or(0)
    }

    /// Top `n` documents by BM25 for analysed terms (as from
    /// [`Self::query_terms`]), best first.
    pub(crate) fn search_terms(
        &self,
        terms: &[String],
        n: usize,
        allowed: Option<Arc<Vec<bool>>>,
    ) -> SearchResultOf<Vec<(u64, f32)>> {
        if terms.is_empty() || n == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.text, t),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, q)
            })
            .collect();
        let query = BooleanQuery::new(clauses);
        let searcher = self.reader.searcher();
        let collector = TopDocs::with_limit(n).order_by_score();
        let top = match allowed {
            None => searcher.search(&query, &collector)?,
            Some(allowed) => searcher.search(
                &query,
                &FilterCollector::new(
                    "doc".to_owned(),
                    move |d: u64| {
                        usize::try_from(d)
                            .ok()
                            .and_then(|d| allowed.get(d).copied())
                            .unwrap_or(false)
                    },
                    collector,
                ),
            )?,
        };
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let column = searcher
                .segment_reader(address.segment_ord)
                .fast_fields()
                .u64("doc")?;
            if let Some(doc) = column.first(address.doc_id) {
                out.push((doc, score));
            }
        }
        Ok(out)
    }
}
