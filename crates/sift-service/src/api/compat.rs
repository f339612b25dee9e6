//! The shapes of the search APIs the agent harnesses' own clients speak: InterLV-Search's
//! local tools, Serper, SerpAPI and Jina Reader (docs/src/serving.md).
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::default_top_k;

/// InterLV-Search's local knowledge-base tools' arguments (`local_text_search`,
/// `local_text_to_image_search`; `local_image_search` takes `image`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSearchRequest {
    /// Query text.
    #[serde(default)]
    pub query: String,
    /// A query image (`local_image_search`): a corpus image id, base64 or a data URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Number of results.
    #[serde(default = "default_local_top_k")]
    #[schemars(range(min = 1, max = 1000))]
    pub top_k: usize,
    /// Cut each text to this many characters.
    #[serde(default = "default_local_chars")]
    pub max_text_chars: usize,
    /// Domain (default: every domain served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Retriever (default: the first served that fits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retriever: Option<String>,
}

fn default_local_top_k() -> usize {
    5
}

fn default_local_chars() -> usize {
    1200
}

/// One result of InterLV-Search's local tools.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LocalResult {
    /// 1-based rank.
    pub rank: usize,
    /// Passage or image id.
    pub entity_id: String,
    /// Score.
    pub score: f64,
    /// Whether an image goes with the result.
    pub has_image: bool,
    /// Text (cut to `max_text_chars`; an image result's page text when known).
    pub text: String,
}

/// InterLV-Search's local tools' answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LocalResponse {
    /// Always `local_kb`.
    pub source: String,
    /// Results, best first.
    pub results: Vec<LocalResult>,
}

/// A count given as a JSON number or as a string of digits (query strings hold strings;
/// some clients send `"num": "10"`).
fn lenient_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Count {
        Number(usize),
        Text(String),
    }
    match Count::deserialize(d)? {
        Count::Number(n) => Ok(n),
        Count::Text(t) => t
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not a whole number"))),
    }
}

fn first_page() -> usize {
    1
}

/// What a Serper query may narrow by, accepted and echoed in `searchParameters` as given:
/// the index has no countries, languages, places or dates.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct SerperEcho {
    /// Country.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gl: Option<serde_json::Value>,
    /// Language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hl: Option<serde_json::Value>,
    /// Location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<serde_json::Value>,
    /// Time filter, `qdr:d` or `cdr:1,cd_min:...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tbs: Option<serde_json::Value>,
}

/// Serper's query of `/search`, `/images`, `/videos` and `/news`: the JSON body of a POST
/// (or each element of a JSON array of them, Serper's batch form), or a GET's query string.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerperQuery {
    /// Query text.
    pub q: String,
    /// Results per page (Serper's default 10).
    #[serde(default = "default_top_k", deserialize_with = "lenient_count")]
    #[schemars(range(min = 1, max = 1000))]
    pub num: usize,
    /// 1-based page of `num` results.
    #[serde(default = "first_page", deserialize_with = "lenient_count")]
    #[schemars(range(min = 1))]
    pub page: usize,
    /// Country, language, location and time filter: accepted and echoed.
    #[serde(flatten)]
    pub echo: SerperEcho,
    /// Sift's: the domain to search (default: every domain served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Parameters some harnesses nest (`{"country", "page"}`): a `page` here pages as
    /// `page` does.
    #[serde(
        default,
        rename = "extendParams",
        skip_serializing_if = "Option::is_none"
    )]
    pub extend_params: Option<serde_json::Value>,
    /// Anything else (`autocorrect`, `type`, `api_key`, ...): accepted and ignored.
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}

/// Serper's `/lens` query: an image URL, which here is a link this service gave out
/// (`.../v1/{domain}/image/{id}`), a corpus image id, a `data:` URL or base64; other URLs
/// are refused (nothing is fetched from outside).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerperLens {
    /// The image.
    pub url: String,
    /// Results per page.
    #[serde(default = "default_top_k", deserialize_with = "lenient_count")]
    #[schemars(range(min = 1, max = 1000))]
    pub num: usize,
    /// 1-based page of `num` results.
    #[serde(default = "first_page", deserialize_with = "lenient_count")]
    #[schemars(range(min = 1))]
    pub page: usize,
    /// Sift's: the domain to search (default: the link's, else every domain served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Anything else (`gl`, `hl`, `api_key`, ...): accepted and ignored.
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}

/// Serper's echo of the query.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperParameters {
    /// The query (absent for `/lens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// The image URL (`/lens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Kind of search: `search`, `images`, `lens`, `videos`, `news`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Results per page.
    pub num: usize,
    /// Page.
    pub page: usize,
    /// Echoed as given.
    #[serde(flatten)]
    pub echo: SerperEcho,
    /// Always `sift`.
    pub engine: String,
}

/// A Serper organic result: a passage of `/search`, or a visual match of `/lens` (with its
/// `imageUrl`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperOrganic {
    /// Passage (or image) id.
    pub title: String,
    /// Its readable page on this service (HTML; Markdown or text on request).
    pub link: String,
    /// The page's text, cut.
    pub snippet: String,
    /// The domain (Serper's site name).
    pub source: String,
    /// 1-based rank, counted over every page.
    pub position: usize,
    /// The image (`/lens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// The same (`/lens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbnail_url: Option<String>,
}

/// Serper's `/search` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperSearchResponse {
    /// The query.
    pub search_parameters: SerperParameters,
    /// Results.
    pub organic: Vec<SerperOrganic>,
}

/// A Serper image result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperImage {
    /// Image id.
    pub title: String,
    /// The image on this service.
    pub image_url: String,
    /// The same (Serper's thumbnail).
    pub thumbnail_url: String,
    /// The image's readable page: its page's first passage with its images, else the image
    /// alone.
    pub link: String,
    /// The domain (Serper's site name).
    pub source: String,
    /// 1-based rank, counted over every page.
    pub position: usize,
}

/// Serper's `/images` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperImagesResponse {
    /// The query.
    pub search_parameters: SerperParameters,
    /// Results.
    pub images: Vec<SerperImage>,
}

/// Serper's `/lens` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperLensResponse {
    /// The query.
    pub search_parameters: SerperParameters,
    /// Corpus images like the given one, as Serper gives visual matches: `title`, `link`,
    /// `imageUrl`, `thumbnailUrl`, `source`.
    pub organic: Vec<SerperOrganic>,
}

/// Serper's `/videos` answer: the index holds no videos.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperVideosResponse {
    /// The query.
    pub search_parameters: SerperParameters,
    /// Always empty.
    pub videos: Vec<serde_json::Value>,
}

/// Serper's `/news` answer: the index holds no news.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerperNewsResponse {
    /// The query.
    pub search_parameters: SerperParameters,
    /// Always empty.
    pub news: Vec<serde_json::Value>,
}

/// SerpAPI's `search_metadata`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiMetadata {
    /// Search id.
    pub id: String,
    /// `Success`.
    pub status: String,
    /// This search again, as a URL on this service.
    pub json_endpoint: String,
    /// When, `YYYY-MM-DD HH:MM:SS UTC`.
    pub created_at: String,
    /// The same.
    pub processed_at: String,
    /// Seconds the search took.
    pub total_time_taken: f64,
}

/// SerpAPI's `search_information`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiInformation {
    /// `Results for exact spelling`, or `Fully empty`.
    pub organic_results_state: String,
    /// The query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_displayed: Option<String>,
    /// Results on this page.
    pub total_results: usize,
}

/// One of SerpAPI's `organic_results`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiOrganic {
    /// 1-based rank, counted from `start`.
    pub position: usize,
    /// Passage id.
    pub title: String,
    /// Its readable page.
    pub link: String,
    /// The link as shown (`host › domain › id`).
    pub displayed_link: String,
    /// The passage text, cut.
    pub snippet: String,
    /// The domain.
    pub source: String,
}

/// One of SerpAPI's `images_results`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiImage {
    /// 1-based rank.
    pub position: usize,
    /// Image id.
    pub title: String,
    /// The image on this service.
    pub original: String,
    /// The same.
    pub thumbnail: String,
    /// The image's readable page.
    pub link: String,
    /// The domain.
    pub source: String,
    /// Always false.
    pub is_product: bool,
}

/// One of SerpAPI's `visual_matches` (`engine=google_lens`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiVisualMatch {
    /// 1-based rank.
    pub position: usize,
    /// Image id.
    pub title: String,
    /// The image's readable page.
    pub link: String,
    /// The domain.
    pub source: String,
    /// The image on this service.
    pub thumbnail: String,
    /// The same.
    pub image: String,
}

/// SerpAPI's answer to `GET /search` or `/search.json` (`engine=google`, `google_images`,
/// `google_lens`). A failure is `{"error": "..."}` alone, with a 4xx or 5xx status; a search
/// without results is a 200 whose `error` says so, as SerpAPI answers it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SerpApiResponse {
    /// About the search.
    pub search_metadata: SerpApiMetadata,
    /// The parameters, as given (`api_key` left out).
    pub search_parameters: BTreeMap<String, String>,
    /// About the results.
    pub search_information: SerpApiInformation,
    /// `engine=google`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organic_results: Option<Vec<SerpApiOrganic>>,
    /// `engine=google_images`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_results: Option<Vec<SerpApiImage>>,
    /// `engine=google_lens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visual_matches: Option<Vec<SerpApiVisualMatch>>,
    /// Set when there are no results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Jina Reader's JSON answer (`GET /r/{url}` with `Accept: application/json`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReaderResponse {
    /// 200.
    pub code: u16,
    /// 20000.
    pub status: u32,
    /// The page.
    pub data: ReaderPage,
}

/// A page as Jina Reader gives it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReaderPage {
    /// Title.
    pub title: String,
    /// The first sentence of the text, cut.
    pub description: String,
    /// The URL read.
    pub url: String,
    /// The page as Markdown.
    pub content: String,
    /// The page's images: alt text -> URL.
    pub images: BTreeMap<String, String>,
}

/// Bing Web Search v7's `GET /v7.0/search` parameters (Search-o1 / WebThinker /
/// DeepResearcher send `q`, `count`, `offset`, `mkt`, `setLang`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct BingQuery {
    /// Query text.
    pub q: String,
    /// Results (Bing's default 10; 1 to 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<String>,
    /// Results to skip (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Market and language: accepted and ignored.
    #[serde(flatten)]
    pub rest: BTreeMap<String, String>,
}

/// Bing's answer: `webPages.value[]`, what its clients read.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BingResponse {
    /// `"SearchResponse"`.
    #[serde(rename = "_type")]
    pub kind: String,
    /// The query as sent.
    #[serde(rename = "queryContext")]
    pub query_context: BingQueryContext,
    /// The results.
    #[serde(rename = "webPages")]
    pub web_pages: BingWebPages,
}

/// Bing's `queryContext`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BingQueryContext {
    /// The query.
    #[serde(rename = "originalQuery")]
    pub original_query: String,
}

/// Bing's `webPages`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BingWebPages {
    /// This search on the service.
    #[serde(rename = "webSearchUrl")]
    pub web_search_url: String,
    /// Results there are at most (the results of this page's depth).
    #[serde(rename = "totalEstimatedMatches")]
    pub total_estimated_matches: usize,
    /// The results.
    pub value: Vec<BingWebPage>,
}

/// One Bing web page result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BingWebPage {
    /// `"<webSearchUrl>#WebPages.<i>"`.
    pub id: String,
    /// The title (the passage's, else its id).
    pub name: String,
    /// The passage's readable page.
    pub url: String,
    /// The same, as shown.
    #[serde(rename = "displayUrl")]
    pub display_url: String,
    /// The passage text, cut.
    pub snippet: String,
    /// The domain.
    #[serde(rename = "siteName")]
    pub site_name: String,
    /// Always true.
    #[serde(rename = "isFamilyFriendly")]
    pub is_family_friendly: bool,
}
