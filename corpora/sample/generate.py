#!/usr/bin/env python3
"""Deterministic generator for the Sift sample corpus (MM-BRIGHT hub layout).

Usage:
    python3 corpora/sample/generate.py

Writes, next to this script:
    documents/{domain}.parquet            id, content
    examples/{domain}.parquet             Task 1 queries
    examples_multimodal/{domain}.parquet  Tasks 2-4 queries (+ positive/negative images)
    document_images/{domain}.parquet      path, bytes
    examples_images/{domain}.parquet      path, bytes (query images)

Then reads everything back, checks the invariants the tests rely on, and
prints a short summary. Requires pyarrow and Pillow (see requirements.txt).
No randomness beyond a fixed seed; no timestamps; reruns with the pinned
library versions produce byte-identical files.

The deliberate oddities (see README.md, "Deliberate oddities") are declared
in ODDITIES below and asserted during verification.
"""

from __future__ import annotations

import io
import math
import random
import re
import struct
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parent
SEED = 20240611
DOMAINS = ("biology", "gis", "physics")
# The one domain whose positive_images / negative_images are
# list<struct<image_path: string, caption: string>>; the others use list<string>.
STRUCT_IMAGE_DOMAIN = "physics"

# ---------------------------------------------------------------------------
# Passages: {domain: [(hex_key, [passage_0, passage_1, ...]), ...]}
# Passage ids are f"{domain}/{key}_{n}.txt".
# ---------------------------------------------------------------------------
PASSAGES: dict[str, list[tuple[str, list[str]]]] = {
    "biology": [
        ("a7beca61", [  # photosynthesis
            "The light-dependent reactions of photosynthesis take place in the "
            "thylakoid membranes of the chloroplast. Photosystem II absorbs photons "
            "and uses the energy to split water molecules, a process called "
            "photolysis. Splitting water releases electrons, protons and molecular "
            "oxygen, so the oxygen that plants give off comes from water rather than "
            "from carbon dioxide. The electrons pass along an electron transport chain "
            "to photosystem I, producing ATP and NADPH.",
            "The Calvin cycle, also called the light-independent reactions, runs in the "
            "stroma of the chloroplast. The enzyme RuBisCO fixes carbon dioxide onto "
            "ribulose-1,5-bisphosphate, and the resulting molecules are reduced using "
            "ATP and NADPH to glyceraldehyde-3-phosphate (G3P). Some G3P leaves the "
            "cycle to build glucose and sucrose while the rest regenerates RuBP.",
            "RuBisCO can bind oxygen instead of carbon dioxide, a wasteful side "
            "reaction called photorespiration that becomes worse in hot, dry weather "
            "when stomata close. C4 plants such as maize concentrate CO2 in bundle "
            "sheath cells using PEP carboxylase, while CAM plants such as cacti open "
            "their stomata only at night and store carbon as malic acid.",
        ]),
        ("3c91f0d2", [  # mitochondria / respiration
            "Mitochondria are double-membrane organelles often described as the "
            "powerhouse of the cell. The inner membrane is folded into cristae, which "
            "enlarge the surface available for respiration, and encloses the matrix. "
            "Mitochondria carry their own circular DNA and ribosomes, evidence for the "
            "endosymbiotic theory that they descend from free-living bacteria.",
            "In oxidative phosphorylation, NADH and FADH2 donate electrons to the "
            "electron transport chain in the inner mitochondrial membrane. As electrons "
            "move through complexes I, III and IV, protons are pumped into the "
            "intermembrane space, creating a proton gradient. Protons flow back through "
            "ATP synthase, whose rotating motor phosphorylates ADP to ATP; this "
            "coupling is known as chemiosmosis. Oxygen is the final electron acceptor "
            "and is reduced to water.",
            "The citric acid cycle, or Krebs cycle, oxidises acetyl-CoA derived from "
            "pyruvate and fatty acids in the mitochondrial matrix. Each turn releases "
            "two molecules of carbon dioxide and produces three NADH, one FADH2 and one "
            "GTP or ATP. The cycle regenerates oxaloacetate so that it can accept the "
            "next acetyl group.",
        ]),
        ("5e2b8a47", [  # enzyme kinetics
            "Michaelis-Menten kinetics describes how the initial reaction rate of an "
            "enzyme depends on substrate concentration. The rate rises steeply at low "
            "substrate levels and saturates at Vmax when every active site is occupied. "
            "The Michaelis constant Km is the substrate concentration at which the rate "
            "is half of Vmax, and a low Km indicates high apparent affinity.",
            "A competitive inhibitor resembles the substrate and binds the active site, "
            "so it raises the apparent Km while Vmax stays unchanged because enough "
            "substrate can outcompete it. A noncompetitive inhibitor binds elsewhere on "
            "the enzyme and lowers Vmax without changing Km. A Lineweaver-Burk "
            "double-reciprocal plot separates these inhibition types by where the "
            "lines intersect.",
            "Enzyme activity depends on temperature and pH. Warming speeds up "
            "collisions until the optimum temperature, after which the protein "
            "denatures and the active site loses its shape. Each enzyme also has an "
            "optimum pH: pepsin works in the acidic stomach while trypsin prefers the "
            "mildly alkaline small intestine.",
        ]),
        ("9d04c6e3", [  # DNA replication
            "DNA replication begins at an origin where helicase unwinds the double "
            "helix and single-strand binding proteins keep the strands apart. Primase "
            "lays down short RNA primers and DNA polymerase III extends them in the "
            "5' to 3' direction. The leading strand is synthesised continuously, but "
            "the lagging strand is made discontinuously as Okazaki fragments that DNA "
            "ligase later joins.",
            "DNA polymerases proofread as they copy: a 3' to 5' exonuclease activity "
            "removes a mismatched nucleotide right after it is added. Errors that escape "
            "proofreading are caught by mismatch repair, which recognises the newly "
            "synthesised strand and excises the wrong base, keeping the overall error "
            "rate near one per billion nucleotides.",
            "Because the lagging strand needs an RNA primer, linear chromosomes would "
            "lose a little sequence at their ends in every round of replication. "
            "Telomeres are repetitive TTAGGG sequences that buffer this end-replication "
            "problem, and the enzyme telomerase uses its own RNA template to extend "
            "them in stem cells, germ cells and many cancer cells.",
        ]),
        ("1b7f3e90", [  # immune system
            "The innate immune system responds within hours using barriers such as "
            "skin, and cells such as neutrophils and macrophages. These cells recognise "
            "conserved microbial patterns, for example bacterial lipopolysaccharide, "
            "through pattern recognition receptors like the Toll-like receptors, and "
            "trigger inflammation and phagocytosis.",
            "Adaptive immunity is slower but highly specific and has memory. Each B "
            "lymphocyte carries a unique antibody that binds one antigen epitope; "
            "binding triggers clonal selection, and the expanded clone differentiates "
            "into plasma cells that secrete antibodies and memory B cells that speed up "
            "the response to a second infection. Vaccination exploits this memory.",
        ]),
        ("6d2e91ab", [  # membranes and transport
            "Osmosis is the diffusion of water across a selectively permeable membrane "
            "from a region of low solute concentration to one of high solute "
            "concentration. A red blood cell placed in a hypotonic solution swells and "
            "may burst, whereas in a hypertonic solution it shrinks. Plant cells resist "
            "bursting because the cell wall generates turgor pressure.",
            "The sodium-potassium pump is a membrane ATPase that moves three sodium ions "
            "out of the cell and two potassium ions in for every ATP hydrolysed. This "
            "active transport maintains the resting membrane potential of neurons and "
            "drives secondary transporters such as the sodium-glucose cotransporter.",
        ]),
    ],
    "gis": [
        ("1f3a9c2e", [  # map projections
            "The Mercator projection is conformal: it preserves angles and local shapes, "
            "which made it ideal for marine navigation because a line of constant "
            "compass bearing is straight. The price is severe area distortion toward the "
            "poles, so Greenland appears about as large as Africa although Africa is "
            "roughly fourteen times bigger.",
            "Equal-area projections such as Albers conic, Lambert azimuthal equal-area "
            "and Mollweide preserve the relative size of regions at the cost of shape. "
            "They are the right choice for choropleth and thematic maps, density maps, "
            "and any analysis that compares the areas of countries or land-cover classes.",
            "The Universal Transverse Mercator (UTM) system divides the globe into sixty "
            "zones, each six degrees of longitude wide, and applies a transverse "
            "Mercator projection to each. Within a zone, distortion stays below about "
            "one part in a thousand, which is why UTM coordinates in metres are popular "
            "for surveying and local mapping.",
        ]),
        ("6b8d2f14", [  # raster vs vector
            "The vector data model represents geographic features as points, lines and "
            "polygons defined by coordinate vertices, each linked to a row in an "
            "attribute table. Vectors suit discrete objects like roads, parcels and "
            "wells, support topology rules, and are commonly stored in shapefiles, "
            "GeoPackage or GeoJSON.",
            "The raster data model divides space into a regular grid of cells, each "
            "holding a value such as elevation, temperature or land-cover class. "
            "Rasters suit continuous surfaces: a digital elevation model (DEM) stored "
            "as a GeoTIFF supports slope, aspect and hillshade calculations directly. "
            "The cell size sets the spatial resolution and strongly affects file size.",
            "Converting between models is routine. Rasterization burns vector polygons "
            "into a grid, while polygonize traces contiguous raster cells of equal value "
            "into polygons. Contour lines can be generated from a DEM, but the contours "
            "lose the elevation information between the lines.",
        ]),
        ("c4e7a093", [  # coordinate reference systems
            "A coordinate reference system (CRS) tells software how coordinates relate "
            "to places on the Earth. A geographic CRS such as WGS 84 (EPSG:4326) uses "
            "latitude and longitude in degrees on an ellipsoid and datum, whereas a "
            "projected CRS such as a UTM zone uses planar x and y coordinates in metres.",
            "When layers with different coordinate reference systems are loaded "
            "together, QGIS reprojects them on the fly to the project CRS so they line "
            "up on screen. For analysis such as measuring distances or buffering, the "
            "data should be reprojected permanently, for example with Export > Save "
            "Features As or the Reproject Layer tool, into a projected CRS in metres "
            "rather than degrees. Web maps typically use Web Mercator, EPSG:3857.",
            "Datums can differ by tens or hundreds of metres: coordinates in NAD27 and "
            "NAD83 for the same point in North America do not match. A datum "
            "transformation, often using grid shift files in the PROJ library, is "
            "needed to convert accurately between them; picking the wrong "
            "transformation causes a systematic offset between layers.",
        ]),
        ("0a5d9b71", [  # QGIS
            "QGIS is a free and open-source desktop GIS. Layers are added through the "
            "Data Source Manager or by dragging files into the map canvas, and they "
            "appear in the Layers panel where their drawing order, visibility and "
            "symbology can be changed. Python plugins from the plugin repository extend "
            "the application with extra tools.",
            "The QGIS field calculator creates or updates attribute columns using "
            "expressions. For example, the expression $area returns the area of each "
            "polygon in the units of the layer's CRS or the project's ellipsoid, and "
            "round($area / 10000, 2) gives hectares. Expressions can also combine "
            "fields, call string functions, and use conditional CASE WHEN statements.",
            "The Processing Toolbox in QGIS collects hundreds of geoprocessing "
            "algorithms from GDAL, GRASS and SAGA. Any algorithm can run in batch mode "
            "over many input files, and the graphical modeler chains algorithms into a "
            "reusable workflow that can be exported as a Python script.",
        ]),
        ("8e3f6a20", [  # spatial analysis
            "A buffer creates a polygon at a fixed distance around a feature, for "
            "example 500 metres either side of a river. Combining the buffer with a "
            "select-by-location or intersect overlay finds all parcels, wells or "
            "buildings within that distance. Buffers must be computed in a projected "
            "CRS so the distance is in metres, not degrees.",
            "Spatial queries on large datasets rely on a spatial index such as an R-tree, "
            "which groups nearby features into nested bounding rectangles. A query "
            "first checks bounding boxes, then tests exact geometry only for candidate "
            "features, which makes point-in-polygon and nearest-neighbour searches fast.",
        ]),
        ("2f7c0d56", [  # geocoding
            "Geocoding converts street addresses or place names into coordinates, while "
            "reverse geocoding turns coordinates back into a readable address. Address "
            "matching relies on reference data such as street centrelines with house "
            "number ranges, and results carry a match score indicating confidence.",
        ]),
    ],
    "physics": [
        ("2e6f8c35", [  # thermodynamics
            "The first law of thermodynamics is conservation of energy: the change in "
            "the internal energy of a system equals the heat added to it minus the work "
            "it does on its surroundings. Heat and work are both ways of transferring "
            "energy, and neither is a property stored in the system.",
            "The second law of thermodynamics states that the entropy of an isolated "
            "system never decreases. A consequence is that no heat engine operating "
            "between two reservoirs can exceed the Carnot efficiency, 1 - Tc/Th, so "
            "even a frictionless engine must reject some heat to the cold reservoir and "
            "cannot reach 100 percent efficiency.",
            "Heat engines such as steam turbines and petrol engines convert part of the "
            "heat from a hot source into work and dump the rest as waste heat. "
            "Refrigerators and heat pumps run the cycle in reverse, using work to move "
            "heat from cold to hot; their performance is measured by the coefficient of "
            "performance rather than an efficiency.",
        ]),
        ("7a1c4d08", [  # optics
            "Refraction is the bending of light as it passes between media with "
            "different refractive indices, described by Snell's law, n1 sin(theta1) = "
            "n2 sin(theta2). Light slows down in water, so a straw in a glass appears "
            "bent at the surface and a pool looks shallower than it really is.",
            "When light travels from a denser medium toward a less dense one at an "
            "angle larger than the critical angle, it undergoes total internal "
            "reflection. Optical fibres exploit this: a glass core with a higher "
            "refractive index than the surrounding cladding traps light so it can carry "
            "data over kilometres with little loss.",
            "Diffraction and interference reveal the wave nature of light. In Young's "
            "double-slit experiment, light from two narrow slits produces bright and "
            "dark fringes where the path difference is a whole or half number of "
            "wavelengths. A diffraction grating with many slits separates colours "
            "sharply and is used in spectrometers.",
        ]),
        ("d39b5e62", [  # quantum tunnelling
            "Quantum tunnelling lets a particle cross a potential barrier even when its "
            "energy is lower than the barrier height, something forbidden in classical "
            "mechanics. Inside the barrier the wavefunction does not vanish but decays "
            "exponentially, so an electron has a small but nonzero probability of "
            "appearing on the far side; the probability falls rapidly with barrier "
            "width and height.",
            "Tunnelling explains alpha decay: George Gamow showed that an alpha particle "
            "escapes the nucleus by tunnelling through the Coulomb barrier, which "
            "accounts for the enormous range of half-lives. The scanning tunnelling "
            "microscope uses the exponential sensitivity of the tunnelling current to "
            "the gap between a sharp tip and a surface to image individual atoms.",
            "Engineered devices rely on tunnelling too. A tunnel diode has a heavily "
            "doped, very thin p-n junction that produces negative differential "
            "resistance, and flash memory stores bits by tunnelling electrons through a "
            "thin oxide onto a floating gate.",
        ]),
        ("48f0a1bc", [  # special relativity
            "Special relativity predicts time dilation: a moving clock ticks slower by "
            "the Lorentz factor gamma = 1/sqrt(1 - v^2/c^2). Muons created by cosmic rays "
            "in the upper atmosphere live only about 2.2 microseconds at rest, yet many "
            "reach the ground because their lifetime is dilated in the Earth frame.",
            "Length contraction shortens a moving object along its direction of motion, "
            "and the relativity of simultaneity means observers in relative motion "
            "disagree about whether two distant events happened at the same time. "
            "Together with time dilation these follow from the Lorentz transformation.",
        ]),
        ("95c2e7d1", [  # electromagnetism
            "Faraday's law of induction states that a changing magnetic flux through a "
            "circuit induces an electromotive force. Lenz's law gives the direction: the "
            "induced current opposes the change that produced it. A magnet falling "
            "through a copper pipe induces eddy currents whose magnetic field brakes the "
            "magnet, so it falls slowly.",
            "Maxwell's equations unify electricity and magnetism. A changing electric "
            "field produces a magnetic field and vice versa, so the equations admit "
            "self-sustaining electromagnetic waves that travel at the speed of light, "
            "c = 1/sqrt(mu0 epsilon0), identifying light as an electromagnetic wave.",
        ]),
        ("0b4a6f3e", [  # fluids
            "Bernoulli's principle says that along a streamline of a steady, "
            "incompressible, inviscid flow, an increase in speed is accompanied by a "
            "drop in pressure. It explains the Venturi meter and contributes to the lift "
            "on an aircraft wing, though the full explanation of lift also needs "
            "circulation and the Kutta condition.",
            "Viscosity is a fluid's resistance to shear. The Reynolds number, the ratio "
            "of inertial to viscous forces, predicts whether pipe flow is laminar, with "
            "smooth parallel layers, or turbulent, with chaotic eddies; in a pipe the "
            "transition usually occurs near a Reynolds number of about 2300.",
        ]),
    ],
}

# ---------------------------------------------------------------------------
# Document images: {domain: [(path, format, mode, (w, h)), ...]}
# format "BROKEN" = bytes that are not a decodable image.
# ---------------------------------------------------------------------------
DOC_IMAGES: dict[str, list[tuple[str, str, str, tuple[int, int]]]] = {
    "biology": [
        ("biology/biology_a7beca61_0001/image_1.webp", "WEBP", "RGB", (32, 24)),
        ("biology/biology_a7beca61_0001/image_2.png", "PNG", "RGBA", (24, 24)),
        ("biology/biology_a7beca61_0002/image_1.webp", "WEBP", "RGBA", (40, 30)),
        ("biology/biology_3c91f0d2_0001/image_1.webp", "WEBP", "RGB", (48, 32)),
        ("biology/biology_3c91f0d2_0002/image_1.jpg", "JPEG", "RGB", (64, 48)),
        ("biology/biology_5e2b8a47_0001/image_1.png", "PNG", "L", (32, 32)),
        ("biology/biology_5e2b8a47_0001/image_2.gif", "GIF", "P", (24, 16)),
        ("biology/biology_9d04c6e3_0001/image_1.bmp", "BMP", "RGB", (16, 16)),
        ("biology/biology_9d04c6e3_0003/image_1.png", "PNG", "P", (32, 20)),
        ("biology/biology_1b7f3e90_0001/image_1.jpeg", "JPEG", "L", (40, 40)),
        ("biology/biology_e0c4d5a9_0001/image_1.png", "PNG", "RGB", (20, 20)),
    ],
    "gis": [
        ("gis/gis_1f3a9c2e_0001/image_1.png", "PNG", "RGB", (64, 32)),
        ("gis/gis_1f3a9c2e_0002/image_1.webp", "WEBP", "RGB", (48, 48)),
        ("gis/gis_6b8d2f14_0001/image_1.png", "PNG", "L", (32, 32)),
        ("gis/gis_6b8d2f14_0001/image_2.png", "PNG", "I;16", (32, 24)),
        ("gis/gis_c4e7a093_0001/image_1.jpg", "JPEG", "RGB", (40, 24)),
        ("gis/gis_c4e7a093_0002/image_1.gif", "GIF", "P", (32, 32)),
        ("gis/gis_0a5d9b71_0001/image_1.png", "PNG", "RGBA", (64, 40)),
        ("gis/gis_0a5d9b71_0001/image_2.bmp", "BMP", "RGB", (24, 16)),
        ("gis/gis_8e3f6a20_0001/image_1.png", "PNG", "P", (32, 32)),
        ("gis/gis_8e3f6a20_0002/image_1.webp", "WEBP", "RGBA", (24, 24)),
        ("gis/gis_2f7c0d56_0001/image_1.jpg", "JPEG", "RGB", (16, 16)),
    ],
    "physics": [
        ("physics/physics_2e6f8c35_0001/image_1.png", "PNG", "RGB", (48, 32)),
        ("physics/physics_2e6f8c35_0002/image_1.gif", "GIF", "P", (40, 30)),
        ("physics/physics_7a1c4d08_0001/image_1.webp", "WEBP", "RGB", (32, 32)),
        ("physics/physics_7a1c4d08_0001/image_2.jpg", "JPEG", "RGB", (64, 48)),
        ("physics/physics_d39b5e62_0001/image_1.png", "PNG", "RGBA", (32, 24)),
        ("physics/physics_d39b5e62_0001/image_2.bmp", "BMP", "L", (16, 16)),
        ("physics/physics_48f0a1bc_0001/image_1.jpeg", "JPEG", "L", (24, 24)),
        ("physics/physics_95c2e7d1_0001/image_1.png", "PNG", "L", (40, 20)),
        ("physics/physics_95c2e7d1_0002/image_1.png", "BROKEN", "-", (0, 0)),
        ("physics/physics_0b4a6f3e_0001/image_1.webp", "WEBP", "RGBA", (32, 32)),
        ("physics/physics_7f00aa11_0001/image_1.gif", "GIF", "P", (20, 16)),
    ],
}

# ---------------------------------------------------------------------------
# Queries. Same ids/text in examples and examples_multimodal.
# n_images: number of query images (stored in examples_images).
# pos / neg: positive_images / negative_images in examples_multimodal
#            (written verbatim, so the odd spellings below are deliberate).
# ---------------------------------------------------------------------------
QUERIES: dict[str, list[dict]] = {
    "biology": [
        dict(id="biology-1",
             query="Why do plants release oxygen during photosynthesis, and where does "
                   "the oxygen actually come from? Is it from the carbon dioxide or "
                   "from water?",
             gold=["a7beca61_0"], answers=["From water split by photosystem II (photolysis)."],
             neg=["a7beca61_1", "3c91f0d2_1"], n_images=1, excluded=0,
             pos_img=["biology/biology_a7beca61_0001/image_1.webp",
                      "biology/biology_a7beca61_0001/image_2.png"],
             neg_img=["biology/biology_3c91f0d2_0002/image_1.jpg"]),
        dict(id="biology-2",
             query="How does the proton gradient across the inner mitochondrial "
                   "membrane actually make ATP? What do the cristae have to do with it?",
             gold=["3c91f0d2_1", "3c91f0d2_0"],
             answers=["Protons flow back through ATP synthase (chemiosmosis).",
                      "Cristae increase membrane surface area."],
             neg=["3c91f0d2_2"], n_images=2, excluded=1,
             pos_img=["biology/biology_3c91f0d2_0001/image_1.webp",
                      "biology/biology_3c91f0d2_0002/image_1.jpg"],
             # oddity (a): same image is positive AND negative for this query
             neg_img=["biology/biology_3c91f0d2_0001/image_1.webp",
                      "biology/biology_a7beca61_0002/image_1.webp"]),
        dict(id="biology-3",
             query="In my enzyme assay a competitive inhibitor was added. What happens "
                   "to Km and Vmax in Michaelis-Menten kinetics?",
             gold=["5e2b8a47_1", "5e2b8a47_0"],
             answers=["Apparent Km increases; Vmax is unchanged."],
             neg=["5e2b8a47_2"], n_images=0, excluded=0,
             pos_img=["biology/biology_5e2b8a47_0001/image_1.png",
                      "biology/biology_5e2b8a47_0001/image_2.gif"],
             neg_img=[]),
        dict(id="biology-4",
             query="Why is the lagging strand made as Okazaki fragments during DNA "
                   "replication, and how do chromosome ends avoid getting shorter "
                   "every time? Is telomerase involved?",
             gold=["9d04c6e3_0", "9d04c6e3_2"],
             answers=["Polymerase only works 5' to 3'; telomerase extends telomeres."],
             neg=["9d04c6e3_1"], n_images=3, excluded=2,
             pos_img=["biology/biology_9d04c6e3_0001/image_1.bmp",
                      "biology/biology_9d04c6e3_0003/image_1.png"],
             neg_img=["biology/biology_5e2b8a47_0001/image_1.png"]),
        dict(id="biology-5",
             query="How do antibodies recognise a pathogen compared with innate immune "
                   "cells like macrophages? Why does immune memory only exist in one?",
             gold=["1b7f3e90_0", "1b7f3e90_1"],
             answers=["Innate: pattern recognition receptors; adaptive: specific antibodies with memory."],
             neg=[], n_images=0, excluded=0,
             # no positive images for this multimodal query
             pos_img=[],
             neg_img=["biology/biology_e0c4d5a9_0001/image_1.png"]),
    ],
    "gis": [
        dict(id="gis-1",
             query="Why does Greenland look as big as Africa on a web map, and which "
                   "map projection preserves area so I can compare the areas of countries?",
             gold=["1f3a9c2e_0", "1f3a9c2e_1"],
             answers=["Mercator distorts area; use an equal-area projection."],
             neg=["c4e7a093_1"], n_images=1, excluded=0,
             # oddity (c): backslash path and './' prefix
             pos_img=["gis\\gis_1f3a9c2e_0001\\image_1.png",
                      "./gis/gis_1f3a9c2e_0002/image_1.webp"],
             neg_img=["gis/gis_c4e7a093_0001/image_1.jpg"]),
        dict(id="gis-2",
             query="My shapefile and GeoTIFF layers don't line up in QGIS; one has "
                   "coordinates in degrees and the other in metres. How do I reproject "
                   "to a common coordinate reference system?",
             gold=["c4e7a093_0", "c4e7a093_1"],
             answers=["Reproject both layers into one projected CRS (e.g. a UTM zone)."],
             neg=["0a5d9b71_0", "1f3a9c2e_2"], n_images=2, excluded=1,
             pos_img=["gis/gis_c4e7a093_0001/image_1.jpg",
                      "gis/gis_c4e7a093_0002/image_1.gif"],
             # oddity (c'): '.\' prefix plus backslashes in a negative
             neg_img=[".\\gis\\gis_0a5d9b71_0001\\image_1.png"]),
        dict(id="gis-3",
             query="Should I store terrain elevation as a raster grid of cells or as "
                   "vector features if I need to compute slope, aspect and hillshade?",
             gold=["6b8d2f14_1"],
             answers=["As a raster DEM."],
             neg=["6b8d2f14_0"], n_images=0, excluded=0,
             # oddity (b): gis_8e3f6a20_0001 is an orphan positive (8e3f6a20 is not a gold key)
             pos_img=["gis/gis_6b8d2f14_0001/image_1.png",
                      "gis/gis_6b8d2f14_0001/image_2.png",
                      "gis/gis_8e3f6a20_0001/image_1.png"],
             neg_img=["gis/gis_0a5d9b71_0001/image_2.bmp"]),
        dict(id="gis-4",
             query="How can I compute a new attribute column with each polygon's area in "
                   "hectares using an expression in the QGIS field calculator?",
             gold=["0a5d9b71_1"],
             answers=["Use the expression round($area / 10000, 2)."],
             neg=["0a5d9b71_2", "8e3f6a20_0", "6b8d2f14_2"], n_images=3, excluded=0,
             pos_img=["gis/gis_0a5d9b71_0001/image_1.png",
                      "gis/gis_0a5d9b71_0001/image_2.bmp"],
             neg_img=[]),
        dict(id="gis-5",
             query="How do I select all parcels within 500 metres of a river? Do I need "
                   "a buffer and a projected CRS?",
             gold=["8e3f6a20_0"],
             answers=["Buffer the river by 500 m in a projected CRS and select by location."],
             neg=["8e3f6a20_1"], n_images=1, excluded=0,
             pos_img=["gis/gis_8e3f6a20_0001/image_1.png",
                      "gis/gis_8e3f6a20_0002/image_1.webp"],
             neg_img=["gis/gis_2f7c0d56_0001/image_1.jpg"]),
    ],
    "physics": [
        dict(id="physics-1",
             query="Why can't any heat engine reach 100 percent efficiency, even "
                   "without friction? Where does the Carnot limit come from?",
             gold=["2e6f8c35_1", "2e6f8c35_2"],
             answers=["The second law limits it to the Carnot efficiency 1 - Tc/Th."],
             neg=["2e6f8c35_0"], n_images=2, excluded=0,
             pos_img=["physics/physics_2e6f8c35_0001/image_1.png",
                      "physics/physics_2e6f8c35_0002/image_1.gif"],
             neg_img=[]),
        dict(id="physics-2",
             query="Why does a straw look bent in a glass of water, and how do optical "
                   "fibres keep the light inside?",
             gold=["7a1c4d08_0", "7a1c4d08_1"],
             answers=["Refraction (Snell's law); total internal reflection."],
             neg=["7a1c4d08_2"], n_images=1, excluded=0,
             pos_img=["physics/physics_7a1c4d08_0001/image_1.webp",
                      "physics/physics_7a1c4d08_0001/image_2.jpg"],
             neg_img=["physics/physics_7f00aa11_0001/image_1.gif"]),
        dict(id="physics-3",
             query="How can an electron get through a potential barrier higher than its "
                   "energy, and how does a scanning tunnelling microscope use this?",
             gold=["d39b5e62_0", "d39b5e62_1"],
             answers=["Quantum tunnelling; the tunnelling current depends exponentially on the gap."],
             neg=["48f0a1bc_0"], n_images=3, excluded=1,
             pos_img=["physics/physics_d39b5e62_0001/image_1.png",
                      "physics/physics_d39b5e62_0001/image_2.bmp"],
             neg_img=["physics/physics_48f0a1bc_0001/image_1.jpeg"]),
        dict(id="physics-4",
             query="Muons have a lifetime of about two microseconds, so how do muons "
                   "created in the upper atmosphere reach the ground?",
             gold=["48f0a1bc_0"],
             answers=["Time dilation."],
             neg=["48f0a1bc_1"], n_images=0, excluded=0,
             pos_img=["physics/physics_48f0a1bc_0001/image_1.jpeg"],
             neg_img=[]),
        dict(id="physics-5",
             query="Why does a magnet falling through a copper pipe fall so slowly?",
             gold=["95c2e7d1_0"],
             answers=["Induced eddy currents oppose its motion (Lenz's law)."],
             neg=["95c2e7d1_1", "0b4a6f3e_0"], n_images=1, excluded=0,
             pos_img=["physics/physics_95c2e7d1_0001/image_1.png"],
             # oddity (d): negative image whose bytes are not a decodable image
             neg_img=["physics/physics_95c2e7d1_0002/image_1.png"]),
    ],
}

# Query images use mixed formats; k-th image of a query cycles through this list.
QUERY_IMAGE_FORMATS = [("PNG", "RGB", "png"), ("JPEG", "RGB", "jpg"), ("PNG", "L", "png")]

ODDITIES = {
    "a_pos_and_neg": ("biology-2", "biology/biology_3c91f0d2_0001/image_1.webp"),
    "b_orphan_positive": ("gis-3", "gis/gis_8e3f6a20_0001/image_1.png"),
    "c_backslash_paths": [
        ("gis-1", "positive_images", "gis\\gis_1f3a9c2e_0001\\image_1.png",
         "gis/gis_1f3a9c2e_0001/image_1.png"),
        ("gis-1", "positive_images", "./gis/gis_1f3a9c2e_0002/image_1.webp",
         "gis/gis_1f3a9c2e_0002/image_1.webp"),
        ("gis-2", "negative_images", ".\\gis\\gis_0a5d9b71_0001\\image_1.png",
         "gis/gis_0a5d9b71_0001/image_1.png"),
    ],
    "d_undecodable": "physics/physics_95c2e7d1_0002/image_1.png",
    "no_positive_images": "biology-5",
    "unmatched_image_keys": [
        "biology/biology_e0c4d5a9_0001/image_1.png",
        "physics/physics_7f00aa11_0001/image_1.gif",
    ],
}

# ---------------------------------------------------------------------------
# Image synthesis (pure Pillow, deterministic)
# ---------------------------------------------------------------------------
PALETTE = [
    (230, 57, 70), (241, 250, 238), (168, 218, 220), (69, 123, 157),
    (29, 53, 87), (42, 157, 143), (233, 196, 106), (244, 162, 97),
]


def _rgb_gradient(size, c1, c2, horizontal):
    w, h = size
    img = Image.new("RGB", size)
    px = []
    for y in range(h):
        for x in range(w):
            t = x / max(w - 1, 1) if horizontal else y / max(h - 1, 1)
            px.append(tuple(int(round(a + (b - a) * t)) for a, b in zip(c1, c2)))
    img.putdata(px)
    return img


def make_image(fmt: str, mode: str, size, rng: random.Random) -> bytes:
    if fmt == "BROKEN":
        # PNG signature + the start of an IHDR chunk, then noise: Pillow (and any
        # decoder) must fail on this.
        return (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"
                + bytes(rng.randrange(256) for _ in range(13)))
    w, h = size
    c1, c2, c3 = rng.sample(PALETTE, 3)
    horizontal = rng.random() < 0.5
    if mode in ("RGB", "RGBA"):
        img = _rgb_gradient(size, c1, c2, horizontal)
        if mode == "RGBA":
            img = img.convert("RGBA")
            # transparent border, semi-transparent middle band
            alpha = Image.new("L", size, 0)
            ImageDraw.Draw(alpha).rectangle([2, 2, w - 3, h - 3], fill=255)
            ImageDraw.Draw(alpha).rectangle([0, h // 3, w - 1, h // 2], fill=128)
            img.putalpha(alpha)
        d = ImageDraw.Draw(img)
        x0, y0 = rng.randrange(w // 2), rng.randrange(h // 2)
        d.ellipse([x0, y0, x0 + w // 3, y0 + h // 3], fill=c3 + ((255,) if mode == "RGBA" else ()))
    elif mode == "L":
        img = _rgb_gradient(size, c1, c2, horizontal).convert("L")
        d = ImageDraw.Draw(img)
        d.line([0, 0, w - 1, h - 1], fill=rng.randrange(256), width=2)
    elif mode == "P":
        img = Image.new("P", size, 0)
        pal = []
        for c in PALETTE:
            pal.extend(c)
        img.putpalette(pal)
        d = ImageDraw.Draw(img)
        for i in range(4):
            x0, y0 = rng.randrange(w - 4), rng.randrange(h - 4)
            d.rectangle([x0, y0, min(w - 1, x0 + w // 3), min(h - 1, y0 + h // 3)],
                        fill=1 + (i + rng.randrange(7)) % 7)
    elif mode == "I;16":
        # 16-bit grayscale "elevation" ramp with a bump: uses the full 0..65535 range
        raw = bytearray()
        for y in range(h):
            for x in range(w):
                v = (x / max(w - 1, 1)) * 0.6 + (y / max(h - 1, 1)) * 0.3
                v += 0.1 * math.exp(-(((x - w / 2) ** 2 + (y - h / 2) ** 2) / (w * h / 8)))
                raw += struct.pack("<H", min(65535, int(v * 65535)))
        img = Image.frombytes("I;16", size, bytes(raw))
    else:
        raise ValueError(mode)
    assert img.mode == mode, (img.mode, mode)
    buf = io.BytesIO()
    if fmt == "JPEG":
        img.save(buf, "JPEG", quality=85, optimize=False)
    elif fmt == "WEBP":
        img.save(buf, "WEBP", quality=80, method=4)
    else:
        img.save(buf, fmt)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# Parquet writing
# ---------------------------------------------------------------------------
LIST_STR = pa.list_(pa.string())
IMAGE_STRUCT = pa.struct([("image_path", pa.string()), ("caption", pa.string())])

DOC_SCHEMA = pa.schema([("id", pa.string()), ("content", pa.string())])
IMG_SCHEMA = pa.schema([("path", pa.string()), ("bytes", pa.binary())])
EX_FIELDS = [
    ("id", pa.string()), ("query", pa.string()), ("gold_ids", LIST_STR),
    ("gold_answers", LIST_STR), ("image_paths", LIST_STR), ("negative_ids", LIST_STR),
]
EX_SCHEMA = pa.schema(EX_FIELDS + [("excluded_ids_count", pa.int64())])


def mm_schema(domain: str) -> pa.Schema:
    img_t = pa.list_(IMAGE_STRUCT) if domain == STRUCT_IMAGE_DOMAIN else LIST_STR
    return pa.schema(EX_FIELDS + [
        ("positive_images", img_t), ("negative_images", img_t), ("body_html", pa.string()),
    ])


def write(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table, path, compression="snappy", use_dictionary=True, write_statistics=True,
        data_page_version="1.0", version="2.6", row_group_size=1024,
    )


def caption_for(path: str) -> str:
    name = path.replace("\\", "/").split("/")
    return f"Figure {name[-1].split('.')[0].split('_')[-1]} from page {name[-2]}"


def generate() -> None:
    rng = random.Random(SEED)
    for domain in DOMAINS:
        # documents
        ids, contents = [], []
        for key, passages in PASSAGES[domain]:
            for n, text in enumerate(passages):
                ids.append(f"{domain}/{key}_{n}.txt")
                contents.append(text)
        write(pa.table({"id": ids, "content": contents}, schema=DOC_SCHEMA),
              OUT / "documents" / f"{domain}.parquet")

        # document images
        paths, blobs = [], []
        for path, fmt, mode, size in DOC_IMAGES[domain]:
            paths.append(path)
            blobs.append(make_image(fmt, mode, size, rng))
        write(pa.table({"path": paths, "bytes": blobs}, schema=IMG_SCHEMA),
              OUT / "document_images" / f"{domain}.parquet")

        # query images + examples
        qpaths, qblobs = [], []
        rows, mm_rows = [], []
        for q in QUERIES[domain]:
            num = q["id"].rsplit("-", 1)[1]
            img_paths = []
            for k in range(1, q["n_images"] + 1):
                fmt, mode, ext = QUERY_IMAGE_FORMATS[(k - 1) % len(QUERY_IMAGE_FORMATS)]
                p = f"{domain}/{domain}_q{num}_0001/image_{k}.{ext}"
                w, h = [(32, 24), (24, 32), (48, 32)][(k - 1) % 3]
                img_paths.append(p)
                qpaths.append(p)
                qblobs.append(make_image(fmt, mode, (w, h), rng))
            base = {
                "id": q["id"],
                "query": q["query"],
                "gold_ids": [f"{domain}/{g}.txt" for g in q["gold"]],
                "gold_answers": q["answers"],
                "image_paths": img_paths,
                "negative_ids": [f"{domain}/{g}.txt" for g in q["neg"]],
            }
            rows.append({**base, "excluded_ids_count": q["excluded"]})
            if domain == STRUCT_IMAGE_DOMAIN:
                pos = [{"image_path": p, "caption": caption_for(p)} for p in q["pos_img"]]
                neg = [{"image_path": p, "caption": caption_for(p)} for p in q["neg_img"]]
            else:
                pos, neg = list(q["pos_img"]), list(q["neg_img"])
            mm_rows.append({**base, "positive_images": pos, "negative_images": neg,
                            "body_html": f"<p>{q['query']}</p>"})
        write(pa.Table.from_pylist(rows, schema=EX_SCHEMA),
              OUT / "examples" / f"{domain}.parquet")
        write(pa.Table.from_pylist(mm_rows, schema=mm_schema(domain)),
              OUT / "examples_multimodal" / f"{domain}.parquet")
        write(pa.table({"path": qpaths, "bytes": qblobs}, schema=IMG_SCHEMA),
              OUT / "examples_images" / f"{domain}.parquet")


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------
DOC_ID_RE = re.compile(r"^(?P<d>[a-z]+)/(?P<key>[0-9a-f]{8})_(?P<n>\d+)\.txt$")
IMG_PATH_RE = re.compile(r"^(?P<d>[a-z]+)/(?P=d)_(?P<key>[0-9a-zA-Z]+)_(?P<n>\d{4})/image_\d+\.[a-z]+$")


def norm_path(p: str) -> str:
    p = p.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def bm25_rank(query: str, doc_ids: list[str], docs: list[str], k1=0.9, b=0.4) -> list[str]:
    toks = [tokenize(d) for d in docs]
    avgdl = sum(map(len, toks)) / len(toks)
    df = Counter(t for ts in toks for t in set(ts))
    n = len(docs)
    scores = []
    for did, ts in zip(doc_ids, toks):
        tf = Counter(ts)
        s = 0.0
        for t in set(tokenize(query)):
            if t in tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(ts) / avgdl))
        scores.append((-s, did))
    return [d for _, d in sorted(scores)]


def img_paths_of(col) -> list[str]:
    return [x["image_path"] if isinstance(x, dict) else x for x in col]


def verify() -> None:
    files = sorted(p.relative_to(OUT) for p in OUT.rglob("*.parquet"))
    total = sum((OUT / f).stat().st_size for f in files)
    print(f"{len(files)} parquet files, {total} bytes total")
    assert total < 1_000_000
    print(f"{'domain':8} {'passages':>8} {'keys':>4} {'queries':>7} {'doc_imgs':>8} {'q_imgs':>6}")
    img_counts_seen = set()
    for domain in DOMAINS:
        docs = pq.read_table(OUT / "documents" / f"{domain}.parquet")
        ex = pq.read_table(OUT / "examples" / f"{domain}.parquet")
        mm = pq.read_table(OUT / "examples_multimodal" / f"{domain}.parquet")
        dimg = pq.read_table(OUT / "document_images" / f"{domain}.parquet")
        qimg = pq.read_table(OUT / "examples_images" / f"{domain}.parquet")
        assert docs.schema == DOC_SCHEMA and ex.schema == EX_SCHEMA
        assert mm.schema == mm_schema(domain)
        assert dimg.schema == IMG_SCHEMA and qimg.schema == IMG_SCHEMA

        doc_ids = docs.column("id").to_pylist()
        contents = docs.column("content").to_pylist()
        assert len(set(doc_ids)) == len(doc_ids) and 12 <= len(doc_ids) <= 20
        keys = set()
        for d in doc_ids:
            m = DOC_ID_RE.match(d)
            assert m and m["d"] == domain, d
            keys.add(m["key"])

        # images decode (except the deliberate broken one) and paths are well-formed
        dpaths = dimg.column("path").to_pylist()
        modes = set()
        for p, blob in zip(dpaths, dimg.column("bytes").to_pylist()):
            m = IMG_PATH_RE.match(p)
            assert m and m["d"] == domain, p
            try:
                with Image.open(io.BytesIO(blob)) as im:
                    im.load()
                    modes.add(f"{im.format}/{im.mode}")
                ok = True
            except Exception:
                ok = False
            assert ok == (p != ODDITIES["d_undecodable"]), p
            if m["key"] not in keys:
                assert p in ODDITIES["unmatched_image_keys"], p
        qpaths = set(qimg.column("path").to_pylist())
        for blob in qimg.column("bytes").to_pylist():
            with Image.open(io.BytesIO(blob)) as im:
                im.load()

        ex_rows = ex.to_pylist()
        mm_rows = mm.to_pylist()
        assert [r["id"] for r in ex_rows] == [r["id"] for r in mm_rows]
        ranks = []
        for r, mr in zip(ex_rows, mm_rows):
            assert set(r["gold_ids"]) <= set(doc_ids) and set(r["negative_ids"]) <= set(doc_ids)
            assert not set(r["gold_ids"]) & set(r["negative_ids"])
            assert set(r["image_paths"]) <= qpaths
            img_counts_seen.add(len(r["image_paths"]))
            for p in img_paths_of(mr["positive_images"]) + img_paths_of(mr["negative_images"]):
                assert norm_path(p) in dpaths, p
            ranking = bm25_rank(r["query"], doc_ids, contents)
            ranks.append(sorted(ranking.index(g) + 1 for g in r["gold_ids"]))
        print(f"{domain:8} {len(doc_ids):>8} {len(keys):>4} {len(ex_rows):>7} "
              f"{len(dpaths):>8} {len(qpaths):>6}   gold BM25 ranks per query: {ranks}")
        print(f"         image formats/modes: {', '.join(sorted(modes))}")
        # every query's best gold passage is BM25 rank 1; all golds are in the top 3
        assert all(rk[0] == 1 and rk[-1] <= 3 for rk in ranks), ranks

    assert img_counts_seen == {0, 1, 2, 3}, img_counts_seen

    # oddities
    def mm_row(qid):
        d = qid.rsplit("-", 1)[0]
        rows = pq.read_table(OUT / "examples_multimodal" / f"{d}.parquet").to_pylist()
        return next(r for r in rows if r["id"] == qid)

    qid, p = ODDITIES["a_pos_and_neg"]
    r = mm_row(qid)
    assert p in img_paths_of(r["positive_images"]) and p in img_paths_of(r["negative_images"])
    qid, p = ODDITIES["b_orphan_positive"]
    r = mm_row(qid)
    gold_keys = {DOC_ID_RE.match(g)["key"] for g in r["gold_ids"]}
    assert p in img_paths_of(r["positive_images"])
    assert IMG_PATH_RE.match(p)["key"] not in gold_keys
    for qid, col, raw, normed in ODDITIES["c_backslash_paths"]:
        assert raw in img_paths_of(mm_row(qid)[col]) and norm_path(raw) == normed
    assert mm_row(ODDITIES["no_positive_images"])["positive_images"] == []
    print("schemas, references, image decoding, BM25 gold ranks and oddities (a)-(d): OK")


if __name__ == "__main__":
    generate()
    verify()
    sys.exit(0)
